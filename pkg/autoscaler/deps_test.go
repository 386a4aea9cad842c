package autoscaler

import (
	"os/exec"
	"strings"
	"testing"
)

// The autoscaler is fed samples and asked for decisions: it imports no other
// part of knbox (router, runtime, controllers, API server).
func TestImportsNoOtherPart(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not installed")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/knbox/knbox/") && dep != "github.com/knbox/knbox/pkg/autoscaler" {
			t.Errorf("imports %s", dep)
		}
	}
}
