package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestTmpExecProtocol(t *testing.T) {
	e := newContractEnv(t)
	svc := contractService("proto", "runc", corev1.Container{Image: e.toolRef})
	svc.Spec.Template.Annotations = map[string]string{"autoscaling.knative.dev/min-scale": "1"}
	e.apply(t, svc)
	e.waitReady(t, svc.Name)
	out := awaitOutput(t, "pod", time.Minute, func() string {
		o, _ := e.kubectlRun(t, "", "get", "pods", "--no-headers")
		return o
	}, func(s string) bool { return strings.Contains(s, "Running") })
	pod := strings.Fields(out)[0]
	bin := "/usr/lib/google-cloud-sdk/bin/kubectl.1.32"
	o, err := run(t, e.k.env, "abc\n", bin, "exec", "-i", "-v=9", pod, "--", "sh", "-c", "cat; exit 3")
	t.Logf("%v\n%s", err, o)
	o, err = run(t, e.k.env, "", bin, "exec", pod, "--", "echo", "hi")
	t.Logf("%v\n%s", err, o)
}
