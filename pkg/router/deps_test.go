package router

import (
	"os/exec"
	"strings"
	"testing"
)

// The data plane must not import the API server, the store, the controllers
// or the runtime: of knbox it uses only the routing table.
func TestImportsNoControlPlane(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not installed")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/knbox/knbox/pkg/router":     true,
		"github.com/knbox/knbox/pkg/routing":    true,
		"github.com/knbox/knbox/pkg/autoscaler": true,
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/knbox/knbox/") && !allowed[dep] {
			t.Errorf("imports %s", dep)
		}
	}
}
