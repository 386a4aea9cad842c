// Package deps keeps the dependency direction of DESIGN.md true: the data
// plane never imports the API server or the store, the API types import no
// implementation package, and leaf packages stay leaves.
package deps

import (
	"os/exec"
	"path/filepath"
	"slices"
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
	"pkg/kubeclient":     {"pkg/"},
}

// forbiddenOutside maps a package to modules outside knbox it must not
// depend on (even indirectly): the pod runtime runs a resolved spec and
// knows neither Knative nor the API's clients.
var forbiddenOutside = map[string][]string{
	// Every package linked into the binary initialises, and keeps its
	// pages resident, in knbox serve too: the CLI's commands are knbox's
	// own, not kubectl's command libraries and cli-runtime's resource
	// builder, which bring kustomize, starlark and gettext.
	// Nor client-go's informer factory, whose every API group's informers
	// reference the umbrella Clientset (see onlyImportedBy): knbox's
	// informers are pkg/kubeclient's; its dynamic factory imports it too.
	"cmd/knbox": {"k8s.io/kubectl/pkg/cmd/", "k8s.io/kubectl/pkg/util/i18n", "k8s.io/cli-runtime/pkg/resource",
		"k8s.io/cli-runtime/pkg/genericclioptions", "sigs.k8s.io/kustomize/", "go.starlark.net/", "github.com/chai2010/gettext-go",
		"k8s.io/client-go/informers", "k8s.io/client-go/dynamic/dynamicinformer"},
	// knbox's client makes the typed clients' requests itself.
	"pkg/kubeclient": {"k8s.io/client-go/kubernetes/typed/", "k8s.io/client-go/applyconfigurations/", "k8s.io/client-go/informers"},
	"pkg/pod":        {"knative.dev/", "k8s.io/client-go/"},
	"pkg/logs":       {"knative.dev/", "k8s.io/"},
	"pkg/dns":        {"knative.dev/", "k8s.io/"},
}

// onlyImportedBy maps a package outside knbox to the only packages that may
// import it among ./cmd/knbox's dependencies.
var onlyImportedBy = map[string][]string{
	// client-go's umbrella Clientset references every API group's typed
	// client and apply configurations: knbox speaks through pkg/kubeclient.
	// Pod Security admission imports it for helpers knbox does not call
	// (NamespaceGetterFromClient, PodListerFromClient), which the linker
	// drops with all they reference (TestBinaryLinksNoGeneratedClients).
	"k8s.io/client-go/kubernetes": {"k8s.io/pod-security-admission/admission"},
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

func TestOnlyImportedBy(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./../../cmd/knbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list cmd/knbox: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if allowed, ok := onlyImportedBy[imp]; ok && !slices.Contains(allowed, f[0]) {
				t.Errorf("%s imports %s (only %s may)", f[0], imp, strings.Join(allowed, ", "))
			}
		}
	}
}

// linkedNot are the prefixes of symbols the binary must not link, whatever
// imports their packages: client-go's generated clients, apply
// configurations and informers, whose code and tables stay resident in
// knbox serve. pkg/kubeclient does what knbox needs of them.
var linkedNot = []string{"k8s.io/client-go/kubernetes.", "k8s.io/client-go/kubernetes/typed/", "k8s.io/client-go/applyconfigurations/",
	"k8s.io/client-go/informers", "k8s.io/client-go/dynamic/dynamicinformer."}

func TestBinaryLinksNoGeneratedClients(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "knbox")
	if out, err := exec.Command("go", "build", "-o", bin, "./../../cmd/knbox").CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/knbox: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	found := map[string]int{}
	example := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		for _, p := range linkedNot {
			if strings.Contains(line, p) {
				found[p]++
				example[p] = strings.TrimSpace(line)
			}
		}
	}
	for _, p := range linkedNot {
		if found[p] > 0 {
			t.Errorf("the binary links %d symbols of %s..., e.g. %s", found[p], p, example[p])
		}
	}
}
