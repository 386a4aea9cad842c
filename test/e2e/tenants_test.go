package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTenants runs knbox for two teams as the README's "Running knbox for
// several teams" says, with the real binary and the real kubectl: users
// from the token file (one bound by name, one by the file's groups column),
// a namespace each, RoleBindings to edit and admin, a ServiceAccount with a
// kubeconfig from knbox kubeconfig --user. Each works in their namespace;
// every cross-namespace read, write, watch and log is 403; cluster-scoped
// kinds, the image endpoints and escalation are refused.
func TestTenants(t *testing.T) {
	kubectl := requireTool(t, "kubectl")
	dir := t.TempDir()
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("alice-0123456789,alice,1001,\"team-a-devs\"\nbob-0123456789,bob,1002,\"team-b-admins,viewers\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startServerWith(t, dir, "", "--token-auth-file", tokens)
	home := t.TempDir()
	as := func(kubeconfig string) func(stdin string, args ...string) (string, error) {
		return func(stdin string, args ...string) (string, error) {
			t.Helper()
			return run(t, []string{"KUBECONFIG=" + kubeconfig, "HOME=" + home}, stdin, kubectl, args...)
		}
	}
	knbox := func(args ...string) (string, error) {
		t.Helper()
		return run(t, []string{"KNBOX_DATA_DIR=" + dir, "KUBECONFIG="}, "", knboxBin, args...)
	}
	must := func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
	forbidden := func(out string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(out, "forbidden") || !strings.Contains(out, want) {
			t.Errorf("want Forbidden with %q, got %v:\n%s", want, err, out)
		}
	}

	// The operator: namespaces, bindings, kubeconfigs.
	admin := as(filepath.Join(dir, "kubeconfig"))
	must(admin("", "create", "namespace", "team-a"))
	must(admin("", "create", "namespace", "team-b"))
	must(admin("", "create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice", "-n", "team-a"))
	must(admin("", "create", "rolebinding", "team-b-admins", "--clusterrole=admin", "--group=team-b-admins", "-n", "team-b"))
	kcs := t.TempDir()
	aliceKC, bobKC := filepath.Join(kcs, "alice"), filepath.Join(kcs, "bob")
	must(knbox("kubeconfig", "--user", "alice", "--token-auth-file", tokens, "-n", "team-a", "-o", aliceKC))
	must(knbox("kubeconfig", "--user", "bob", "--token-auth-file", tokens, "-n", "team-b", "-o", bobKC))
	for _, f := range []string{aliceKC, bobKC, filepath.Join(dir, "kubeconfig")} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v mode %v, want 0600", f, err, fi.Mode().Perm())
		}
	}
	alice, bob := as(aliceKC), as(bobKC)

	// Who am I, what may I do.
	if out := must(alice("", "auth", "whoami")); !strings.Contains(out, "alice") || !strings.Contains(out, "team-a-devs") {
		t.Errorf("whoami:\n%s", out)
	}
	if out := must(alice("", "auth", "can-i", "--list")); !strings.Contains(out, "*.serving.knative.dev") || !strings.Contains(out, "secrets") {
		t.Errorf("can-i --list in team-a:\n%s", out)
	}
	if out, _ := alice("", "auth", "can-i", "create", "ksvc", "-n", "team-b"); strings.TrimSpace(out) != "no" {
		t.Errorf("can-i create ksvc -n team-b: %s", out)
	}

	// Each works in their own namespace.
	svc := strings.Replace(helloYAML, "name: hello", "name: web", 1)
	for name, k := range map[string]func(string, ...string) (string, error){"alice": alice, "bob": bob} {
		if out := must(k(svc, "apply", "-f", "-")); !strings.Contains(out, "service.serving.knative.dev/web created") {
			t.Errorf("%s apply: %s", name, out)
		}
		must(k("", "get", "ksvc", "web"))
		must(k("", "create", "secret", "generic", "creds", "--from-literal=k=v"))
		must(k("", "get", "secret", "creds"))
		must(k("", "get", "ksvc", "--watch", "--request-timeout=1s"))
	}
	// A log of a revision of one's own namespace is authorized (there is
	// none: 404); of the other's, it is not.
	if out, err := alice("", "get", "--raw", "/apis/serving.knative.dev/v1/namespaces/team-a/revisions/none/log"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("own log: %v %s", err, out)
	}

	// Nothing across namespaces: read, write, watch, logs, delete.
	out, err := alice("", "get", "secrets", "-n", "team-b")
	forbidden(out, err, `User "alice" cannot list resource "secrets" in API group "" in the namespace "team-b"`)
	out, err = alice("", "get", "ksvc", "web", "-n", "team-b")
	forbidden(out, err, `cannot get resource "services"`)
	out, err = alice("", "get", "--raw", "/apis/serving.knative.dev/v1/namespaces/team-b/services?watch=true")
	forbidden(out, err, `cannot watch resource "services"`)
	out, err = alice("", "get", "--raw", "/apis/serving.knative.dev/v1/watch/namespaces/team-b/services/web")
	forbidden(out, err, `cannot watch resource "services"`)
	out, err = alice("", "get", "ksvc", "-A")
	forbidden(out, err, "at the cluster scope")
	out, err = alice("", "get", "--raw", "/apis/serving.knative.dev/v1/namespaces/team-b/revisions/web-00001/log")
	forbidden(out, err, `cannot get resource "revisions/log"`)
	out, err = alice(svc, "apply", "-n", "team-b", "-f", "-")
	forbidden(out, err, `in the namespace "team-b"`)
	out, err = alice("", "delete", "ksvc", "web", "-n", "team-b")
	forbidden(out, err, `cannot delete resource "services"`)
	out, err = bob("", "delete", "namespace", "team-a")
	forbidden(out, err, `cannot delete resource "namespaces"`)
	out, err = bob("", "get", "rolebindings", "-n", "team-a")
	forbidden(out, err, `cannot list resource "rolebindings"`)

	// Cluster-scoped kinds and knbox's own endpoints are the operator's.
	out, err = alice("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: mine\nhandler: runc\n", "create", "-f", "-")
	forbidden(out, err, `cannot create resource "runtimeclasses"`)
	out, err = bob("", "create", "clusterrolebinding", "root", "--clusterrole=cluster-admin", "--user=bob")
	forbidden(out, err, `clusterrolebindings`)
	out, err = alice("", "get", "--raw", "/knbox/v1/images")
	forbidden(out, err, `cannot get path "/knbox/v1/images"`)
	if out, err := run(t, []string{"KUBECONFIG=" + bobKC, "HOME=" + home}, "", knboxBin, "image", "prune"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("knbox image prune as bob: %v\n%s", err, out)
	}

	// Escalation: bob administers team-b, but grants nothing he lacks.
	must(bob("", "create", "rolebinding", "carol-edit", "--clusterrole=edit", "--user=carol"))
	out, err = bob("", "create", "rolebinding", "bob-root", "--clusterrole=cluster-admin", "--user=bob")
	forbidden(out, err, "is attempting to grant RBAC permissions not currently held")
	out, err = bob("", "create", "role", "ns-admin", "--verb=delete", "--resource=namespaces")
	forbidden(out, err, "is attempting to grant RBAC permissions not currently held")

	// A ServiceAccount of team-b with a kubeconfig of its own.
	must(bob("", "create", "serviceaccount", "deployer"))
	ciKC := filepath.Join(kcs, "deployer")
	if out, err := run(t, []string{"KUBECONFIG=" + bobKC}, "", knboxBin, "kubeconfig", "--data-dir", dir,
		"--user", "system:serviceaccount:team-b:deployer", "--duration", "1h", "-o", ciKC); err != nil {
		t.Fatalf("knbox kubeconfig --user for a service account, as bob: %v\n%s", err, out)
	}
	ci := as(ciKC)
	if out := must(ci("", "auth", "whoami")); !strings.Contains(out, "system:serviceaccount:team-b:deployer") {
		t.Errorf("whoami:\n%s", out)
	}
	out, err = ci("", "get", "ksvc")
	forbidden(out, err, `User "system:serviceaccount:team-b:deployer" cannot list`)
	must(bob("", "create", "rolebinding", "deployer-edit", "--clusterrole=edit", "--serviceaccount=team-b:deployer"))
	must(ci("", "get", "ksvc", "web"))
	out, err = ci("", "get", "ksvc", "-n", "team-a")
	forbidden(out, err, `in the namespace "team-a"`)
	must(bob("", "delete", "serviceaccount", "deployer"))
	if out, err := ci("", "get", "ksvc"); err == nil || !strings.Contains(out, "Unauthorized") {
		t.Errorf("token of a deleted service account: %v\n%s", err, out)
	}
}
