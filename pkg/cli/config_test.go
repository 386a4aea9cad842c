package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kubeconfigTemplate = `apiVersion: v1
kind: Config
current-context: %CTX%
clusters:
- name: c1
  cluster:
    server: https://one.example:6443
    certificate-authority: ca.crt
- name: c2
  cluster:
    server: https://two.example:6443
    insecure-skip-tls-verify: true
users:
- name: u1
  user:
    token: token-one
- name: u2
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: get-token
contexts:
- name: one
  context: {cluster: c1, user: u1, namespace: team-a}
- name: two
  context: {cluster: c2, user: u1}
- name: exec
  context: {cluster: c2, user: u2}
`

func writeKubeconfig(t *testing.T, dir, currentContext string) string {
	t.Helper()
	p := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(kubeconfigTemplate, "%CTX%", currentContext)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOptionsLoad(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KNBOX_DATA_DIR", "")

	dir := t.TempDir()
	one := writeKubeconfig(t, dir, "one")
	rc, ns, err := Options{Kubeconfig: one}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://one.example:6443" || rc.BearerToken != "token-one" || ns != "team-a" {
		t.Errorf("got host %s token %s namespace %s", rc.Host, rc.BearerToken, ns)
	}
	if want := filepath.Join(dir, "ca.crt"); rc.CAFile != want {
		t.Errorf("CA file %q, want %q (relative to the kubeconfig)", rc.CAFile, want)
	}
	if _, ns, _ := (Options{Kubeconfig: one, Namespace: "x"}).Load(); ns != "x" {
		t.Errorf("-n: namespace %q", ns)
	}

	// The data directory's kubeconfig when nothing else is given; a
	// context without a namespace means "default".
	dataDir := t.TempDir()
	writeKubeconfig(t, dataDir, "two")
	rc, ns, err = Options{DataDir: dataDir}.Load()
	if err != nil || rc.Host != "https://two.example:6443" || !rc.Insecure || ns != "default" {
		t.Errorf("data dir: %+v %q %v", rc, ns, err)
	}
	t.Setenv("KNBOX_DATA_DIR", dataDir)
	if rc, _, err := (Options{}).Load(); err != nil || rc.Host != "https://two.example:6443" {
		t.Errorf("KNBOX_DATA_DIR: %v", err)
	}

	empty := t.TempDir()
	_, _, err = Options{DataDir: empty}.Load()
	if want := "no kubeconfig in " + empty + ": start the server first with `knbox serve --data-dir " + empty + "`"; err == nil || err.Error() != want {
		t.Errorf("missing: err = %v, want %s", err, want)
	}

	// $KUBECONFIG wins over the data directory; a list is merged, missing
	// files are skipped, the first current-context wins.
	other := t.TempDir()
	writeKubeconfig(t, other, "two")
	t.Setenv("KUBECONFIG", strings.Join([]string{filepath.Join(empty, "nope"), one, filepath.Join(other, "kubeconfig")}, string(filepath.ListSeparator)))
	if rc, _, err := (Options{DataDir: dataDir}).Load(); err != nil || rc.Host != "https://one.example:6443" {
		t.Errorf("KUBECONFIG list: %v %v", rc, err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(empty, "nope"))
	if _, _, err := (Options{}).Load(); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("KUBECONFIG missing: %v", err)
	}

	if _, _, err := (Options{Kubeconfig: writeKubeconfig(t, t.TempDir(), "exec")}).Load(); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("exec credentials: %v", err)
	}
	if _, _, err := (Options{Kubeconfig: writeKubeconfig(t, t.TempDir(), "")}).Load(); err == nil || !strings.Contains(err.Error(), "no current-context") {
		t.Errorf("no context: %v", err)
	}
}
