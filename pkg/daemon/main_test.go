package daemon

import (
	"os"
	"testing"

	"github.com/knbox/knbox/pkg/pod"
)

// TestMain lets the test binary be a pod's shim too: Run starts shims with
// its own executable, "shim".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(pod.ShimMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}
