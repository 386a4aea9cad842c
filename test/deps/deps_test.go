// Package deps keeps the dependency direction of DESIGN.md true: the data
// plane never imports the API server or the store, the API types import no
// implementation package, and leaf packages stay leaves.
package deps

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/knbox/knbox/"

// forbidden maps a package to knbox packages it must not depend on (even
// indirectly).
var forbidden = map[string][]string{
	"pkg/apis/...":   {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon", "pkg/cli", "pkg/runtime", "pkg/image", "pkg/autoscaler", "pkg/router", "pkg/controller"},
	"pkg/store":      {"pkg/"},
	"pkg/pki":        {"pkg/"},
	"pkg/config":     {"pkg/"},
	"pkg/admission":  {"pkg/apiserver", "pkg/store", "pkg/daemon", "pkg/cli", "pkg/runtime", "pkg/router"},
	"pkg/apiserver":  {"pkg/daemon", "pkg/cli", "pkg/runtime", "pkg/router", "pkg/image", "pkg/autoscaler", "pkg/controller"},
	"pkg/cli":        {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon"},
	"pkg/runtime":    {"pkg/"},
	"pkg/image":      {"pkg/"},
	"pkg/autoscaler": {"pkg/apiserver", "pkg/store", "pkg/router", "pkg/runtime", "pkg/daemon"},
	"pkg/routing":    {"pkg/"},
	"pkg/oci":        {"pkg/"},
	"pkg/network":    {"pkg/"},
	"pkg/instance":   {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon", "pkg/cli"},
	"pkg/controller": {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon", "pkg/cli", "pkg/router", "pkg/runtime", "pkg/image"},
	"pkg/router":     {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon", "pkg/cli"},
}

func TestDependencyDirection(t *testing.T) {
	for pkg, bans := range forbidden {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./../../"+pkg).CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "matched no packages") || strings.Contains(string(out), "no Go files") || strings.Contains(string(out), "directory not found") {
				continue // not written yet
			}
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		self := strings.TrimSuffix(mod+pkg, "/...")
		for _, dep := range strings.Fields(string(out)) {
			if !strings.HasPrefix(dep, mod) || strings.HasPrefix(dep, self) {
				continue
			}
			// pkg/version is a leaf everyone may use.
			if dep == mod+"pkg/version" {
				continue
			}
			for _, ban := range bans {
				if strings.HasPrefix(dep, mod+ban) {
					t.Errorf("%s depends on %s (forbidden: %s)", pkg, strings.TrimPrefix(dep, mod), ban)
				}
			}
		}
	}
}
