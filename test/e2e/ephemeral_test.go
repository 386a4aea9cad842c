package e2e

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestEphemeralStorageEviction: limits.ephemeralStorage of the config file,
// end to end: a container without a limit gets the operator's default one
// and writes past it, a container writes past its emptyDir's sizeLimit;
// both Revisions fail with reason Evicted and the kubelet's message, under
// runc and runsc. (The containers end on SIGTERM, so that knbox serve
// stops them within the harness's 10s.)
func TestEphemeralStorageEviction(t *testing.T) {
	cfg := ctConfigFile(t, `
limits:
  ephemeralStorage:
    interval: 1s
    defaultContainerLimit: 8Mi
`)
	e := newContractEnv(t, "--config", cfg)
	uid := int64(65532)
	limit := resource.MustParse("4Mi")
	for _, rc := range []string{"runc", "runsc"} {
		e.apply(t, contractService("layer", rc, corev1.Container{
			Image:   e.toolRef,
			Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; dd if=/dev/zero of=/big bs=1M count=16; sleep 3600 & wait"}, // root: / is the image's
		}))
		e.apply(t, contractService("scratch", rc, corev1.Container{
			Image:           e.toolRef,
			Command:         []string{"/bin/sh", "-c", "trap 'exit 0' TERM; dd if=/dev/zero of=/scratch/big bs=1M count=6; sleep 3600 & wait"},
			SecurityContext: &corev1.SecurityContext{RunAsUser: &uid},
			VolumeMounts:    []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}},
		}, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}}))
	}
	for _, rc := range []string{"runc", "runsc"} {
		t.Run(rc+"/default-limit", func(t *testing.T) {
			e.waitRevisionFailed(t, "layer-"+rc+"-00001", "Evicted", "Pod ephemeral local storage usage exceeds the total limit of containers 8Mi.")
		})
		t.Run(rc+"/emptydir-sizelimit", func(t *testing.T) {
			e.waitRevisionFailed(t, "scratch-"+rc+"-00001", "Evicted", `Usage of EmptyDir volume "scratch" exceeds the limit "4Mi".`)
		})
	}
}
