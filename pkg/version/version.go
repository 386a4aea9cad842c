// Package version holds knbox's own version and the Kubernetes API level it
// speaks on the wire. It imports nothing of knbox.
package version

// Version is knbox's release, overridden at link time with
// -ldflags "-X github.com/knbox/knbox/pkg/version.Version=...".
var Version = "0.1.0-dev"

// Kubernetes API level served: the k8s.io/api line that knative.dev/serving
// v0.42 pins. Reported by /version so clients pick compatible behaviour.
const (
	KubeMajor = "1"
	KubeMinor = "29"
)

// GitVersion is the string reported as gitVersion by /version.
func GitVersion() string { return "v" + KubeMajor + "." + KubeMinor + ".0+knbox-" + Version }
