package pod

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/network"
)

// Spec is a pod to run, fully resolved: no reference in it needs an API to
// be read. The caller has chosen the handler, resolved every container's
// environment to plain values, read its Secret and ConfigMap volumes into
// files and defaulted its probes.
type Spec struct {
	// ID names the pod, its directory, network namespace and containers:
	// letters, digits and "-", at most 63, starting and ending with a
	// letter or digit (a DNS label, so it is the hostname too).
	ID string `json:"id"`
	// Labels are the caller's, kept with the pod and returned by Status and
	// Recover (e.g. which Revision the pod belongs to).
	Labels map[string]string `json:"labels,omitempty"`
	// Handler names the runtime handler (runc, runsc, process, ...).
	Handler string `json:"handler"`
	// LogPath is the file the containers' output goes to, in the CRI log
	// format (see package logs). It is kept when the pod is removed.
	LogPath string `json:"logPath"`
	// Security is the pod-level securityContext (may be nil).
	Security *corev1.PodSecurityContext `json:"security,omitempty"`
	// Containers run side by side in the pod's network namespace, started
	// in this order. Their Env holds plain values only (no valueFrom, no
	// envFrom); their volumeMounts name Volumes.
	Containers []corev1.Container `json:"containers"`
	// Images are the image references the containers run, by index (a
	// digest reference, pulled if not cached).
	Images []string `json:"images"`
	// Serving is the index of the container whose readiness and liveness
	// probes are the pod's (the others' probes are ignored) and whose Port
	// the pod is dialled on.
	Serving int `json:"serving"`
	// Port is the serving container's port on the pod's loopback.
	Port int32 `json:"port"`
	// H2C says the port speaks HTTP/2 cleartext (probes use it).
	H2C bool `json:"h2c,omitempty"`
	// Volumes are the volumes the containers mount.
	Volumes []Volume `json:"volumes,omitempty"`
	// GracePeriod is the time between SIGTERM and SIGKILL when the pod's
	// containers are restarted (a failed liveness probe, a sibling's exit);
	// Stop names its own.
	GracePeriod time.Duration `json:"gracePeriod"`
	// ExecProbes allows exec probes (the operator's switch): they run with
	// the handler's exec (runtime.Execer) in the serving container.
	ExecProbes bool `json:"execProbes,omitempty"`
	// PullSecrets are the image pull credentials (kubernetes.io/dockerconfigjson
	// or dockercfg Secrets). They are not written to disk.
	PullSecrets []corev1.Secret `json:"-"`
	// Sequential runs the containers one after another, each to its end,
	// as a kubelet runs init containers, and never restarts them
	// (restartPolicy Never): the pod is Done once every container exited
	// 0 (Succeeded) or one failed (LastFailure says which and why), and
	// stays so, its containers gone, until Stop. Serving, Port and the
	// probes mean nothing then (Port may be 0). A Sequential pod of an
	// earlier knbox is not adopted: Recover removes it (see Recover).
	Sequential bool `json:"sequential,omitempty"`
}

// Volume is one volume of a pod: an empty directory the containers share,
// or a set of files (a Secret, ConfigMap or projected volume, read by the
// caller) that Update replaces atomically.
type Volume struct {
	Name     string `json:"name"`
	EmptyDir bool   `json:"emptyDir,omitempty"`
	// Medium and SizeLimit are an emptyDir's (corev1.EmptyDirVolumeSource):
	// a Memory emptyDir is a tmpfs of SizeLimit bytes (or the pod's memory
	// limit, the smaller of the two when both are set); any other emptyDir
	// is a directory on the data dir's disk, and the pod is evicted when it
	// holds more than SizeLimit (see ephemeral.go). nil: no limit of its own.
	Medium    corev1.StorageMedium `json:"medium,omitempty"`
	SizeLimit *resource.Quantity   `json:"sizeLimit,omitempty"`
	// Files are the volume's files by slash-separated relative path.
	Files map[string]File `json:"-"`
	// Seed, for an emptyDir, is an archive unpacked into it when it is
	// made (a build's uploaded source).
	Seed *Seed `json:"seed,omitempty"`
}

// Seed is a tar archive (plain or gzip) and the bounds of what it unpacks
// to (see image.UnpackArchive), or a Fill function.
type Seed struct {
	Path   string              `json:"path"`
	Limits image.ArchiveLimits `json:"limits"`
	// Fill, when set, fills the directory instead of the archive at Path
	// (a build's git source). It runs in knbox, once the pod's network
	// namespace exists and before any container starts, and is given that
	// namespace as the pod's own network view: what it fetches, it fetches
	// as the pod's containers would. Its error fails the pod with reason
	// ReasonSeedFailed. A Sequential pod is not recovered, so the function
	// need not survive a restart (it is not kept).
	Fill func(ctx context.Context, dir string, net SeedNet) error `json:"-"`
}

// SeedNet is the pod's network view given to Seed.Fill.
type SeedNet struct {
	// NS is the pod's network namespace.
	NS *network.NS
	// Nameservers are the name servers the pod's resolv.conf names (IP
	// addresses, reached from inside NS; none without egress).
	Nameservers []string
}

// SeedError is a seed that failed to fill its volume.
type SeedError struct{ Err error }

func (e *SeedError) Error() string { return e.Err.Error() }
func (e *SeedError) Unwrap() error { return e.Err }

// File is one file of a volume.
type File struct {
	Data []byte
	Mode os.FileMode
}

// validID is a DNS label: what a hostname, a network namespace and a
// runtime's container id all accept.
var validID = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// validate refuses what the runtime cannot run as given.
func (s *Spec) validate() error {
	if !validID.MatchString(s.ID) {
		return fmt.Errorf("pod id %q: want a DNS label (lowercase letters, digits, '-', at most 63)", s.ID)
	}
	if s.LogPath == "" {
		return fmt.Errorf("pod %s: no log path", s.ID)
	}
	if len(s.Containers) == 0 {
		return fmt.Errorf("pod %s: no container", s.ID)
	}
	if len(s.Images) != len(s.Containers) {
		return fmt.Errorf("pod %s: %d images for %d containers", s.ID, len(s.Images), len(s.Containers))
	}
	if s.Serving < 0 || s.Serving >= len(s.Containers) {
		return fmt.Errorf("pod %s: serving container %d out of range", s.ID, s.Serving)
	}
	if s.Sequential {
		s.Port = 0
	} else if s.Port <= 0 || s.Port > 65535 {
		return fmt.Errorf("pod %s: port %d out of range", s.ID, s.Port)
	}
	names := map[string]bool{}
	for i := range s.Containers {
		c := &s.Containers[i]
		if c.Name == "" && len(s.Containers) > 1 {
			return fmt.Errorf("pod %s: containers[%d] has no name", s.ID, i)
		}
		if names[c.Name] {
			return fmt.Errorf("pod %s: two containers named %q", s.ID, c.Name)
		}
		names[c.Name] = true
		if len(c.EnvFrom) > 0 {
			return fmt.Errorf("pod %s: container %q: envFrom is not resolved", s.ID, c.Name)
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				return fmt.Errorf("pod %s: container %q: env %s: valueFrom is not resolved", s.ID, c.Name, e.Name)
			}
		}
	}
	for i := range s.Containers {
		if q, ok := s.Containers[i].Resources.Limits[corev1.ResourceEphemeralStorage]; ok && q.Sign() < 0 {
			return &ConfigError{fmt.Errorf("container %q: resources.limits.ephemeral-storage: must not be negative, was %s", s.Containers[i].Name, q.String())}
		}
	}
	sc := &s.Containers[s.Serving]
	if s.Sequential {
		sc = &corev1.Container{} // no probes
	}
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
	}{{"readinessProbe", sc.ReadinessProbe}, {"livenessProbe", sc.LivenessProbe}} {
		if err := checkProbe(p.what, p.probe, s.ExecProbes); err != nil {
			return fmt.Errorf("pod %s: %w", s.ID, err)
		}
	}
	vols := map[string]bool{}
	for _, v := range s.Volumes {
		if v.Name == "" || vols[v.Name] {
			return fmt.Errorf("pod %s: volume names must be unique and not empty (%q)", s.ID, v.Name)
		}
		vols[v.Name] = true
		if err := checkFiles(v.Files); err != nil {
			return &ConfigError{fmt.Errorf("volume %s: %w", v.Name, err)}
		}
		if err := checkEmptyDir(v); err != nil {
			return &ConfigError{fmt.Errorf("volume %s: %w", v.Name, err)}
		}
		if v.Seed != nil && (!v.EmptyDir || v.Medium == corev1.StorageMediumMemory) {
			return &ConfigError{fmt.Errorf("volume %s: only a disk emptyDir is seeded", v.Name)}
		}
	}
	return nil
}

// ConfigError is a failure to assemble what a container needs (a spec the
// operator's policy refuses, a volume's files that cannot be laid out):
// the kubelet's CreateContainerConfigError.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// IsConfigError tells whether err is (or wraps) a ConfigError.
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}
