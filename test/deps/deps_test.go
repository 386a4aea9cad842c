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
	"pkg/quota":      {"pkg/"},
	"pkg/network":    {"pkg/"},
	"pkg/dns":        {"pkg/"},
	"pkg/disk":       {"pkg/"},
	"pkg/logs":       {"pkg/"},
	"pkg/pod":        {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon", "pkg/cli", "pkg/controller", "pkg/router", "pkg/autoscaler", "pkg/replicas", "pkg/routing"},
	"pkg/replicas":   {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon", "pkg/cli", "pkg/controller", "pkg/router", "pkg/autoscaler", "pkg/routing"},
	"pkg/controller": {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon", "pkg/cli", "pkg/router", "pkg/runtime", "pkg/image", "pkg/pod", "pkg/replicas", "pkg/autoscaler"},
	// Builds run through the pod runtime and speak to the API as a client.
	"pkg/build":  {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon", "pkg/cli", "pkg/router", "pkg/controller", "pkg/replicas", "pkg/autoscaler"},
	"pkg/router": {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon", "pkg/cli"},
	// Metrics are told and asked through functions: of knbox they know
	// only the router's RequestInfo.
	"pkg/metrics": {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon", "pkg/cli", "pkg/controller", "pkg/autoscaler",
		"pkg/pod", "pkg/replicas", "pkg/runtime", "pkg/image"},
	// The console reads through the API's handler and is given the
	// metrics' totals by a function.
	"pkg/console": {"pkg/"},
	// Tracing knows only the router's RequestInfo.
	"pkg/tracing": {"pkg/apiserver", "pkg/store", "pkg/admission", "pkg/daemon", "pkg/cli", "pkg/controller", "pkg/autoscaler",
		"pkg/pod", "pkg/replicas", "pkg/runtime", "pkg/image", "pkg/metrics"},
	// Authorization and tokens are leaves the API server feeds.
	"pkg/authz":          {"pkg/"},
	"pkg/serviceaccount": {"pkg/"},
}

// forbiddenOutside maps a package to modules outside knbox it must not
// depend on (even indirectly): the pod runtime runs a resolved spec and
// knows neither Knative nor the API's clients.
var forbiddenOutside = map[string][]string{
	// Every package linked into the binary initialises, and keeps its
	// pages resident, in knbox serve too: the CLI's commands are knbox's
	// own, not kubectl's command libraries and cli-runtime's resource
	// builder, which bring kustomize, starlark and gettext.
	"cmd/knbox": {"k8s.io/kubectl/pkg/cmd/", "k8s.io/kubectl/pkg/util/i18n", "k8s.io/cli-runtime/pkg/resource",
		"k8s.io/cli-runtime/pkg/genericclioptions", "sigs.k8s.io/kustomize/", "go.starlark.net/", "github.com/chai2010/gettext-go"},
	"pkg/pod":  {"knative.dev/", "k8s.io/client-go/"},
	"pkg/logs": {"knative.dev/", "k8s.io/"},
	"pkg/dns":  {"knative.dev/", "k8s.io/"},
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
			// pkg/version and pkg/disk are leaves everyone may use.
			if dep == mod+"pkg/version" || dep == mod+"pkg/disk" {
				continue
			}
			for _, ban := range bans {
				if strings.HasPrefix(dep, mod+ban) {
					t.Errorf("%s depends on %s (forbidden: %s)", pkg, strings.TrimPrefix(dep, mod), ban)
				}
			}
		}
	}
	for pkg, bans := range forbiddenOutside {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./../../"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, ban := range bans {
				if strings.HasPrefix(dep, ban) {
					t.Errorf("%s depends on %s (forbidden: %s)", pkg, dep, ban)
				}
			}
		}
	}
}
