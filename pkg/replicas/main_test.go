package replicas

import (
	"os"
	"testing"

	"github.com/knbox/knbox/pkg/pod"
)

// TestMain lets the test binary be a pod's shim too (`<test binary> shim
// ...`), as knbox is, for the tests that run pods under shims
// (withShims).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(pod.ShimMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// withShims runs the pods under shims, as knbox does: their containers
// can be prepared (runc create) only there.
func withShims() envOption {
	return withPodOptions(func(o *pod.Options) { o.ShimCommand = []string{os.Args[0], "shim"} })
}
