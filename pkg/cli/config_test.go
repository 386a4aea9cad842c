package cli

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

// contextsKubeconfig is a kubeconfig for env with contexts that differ by
// their credentials: "bad" (the current one) has a wrong token, "good" the
// right one and namespace team-a, "exec" an exec plugin that prints the
// right token.
func contextsKubeconfig(t *testing.T, env *apiservertest.Env) string {
	t.Helper()
	dir := t.TempDir()
	plugin := filepath.Join(dir, "get-token")
	script := "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"" + apiservertest.Token + "\"}}'\n"
	if err := os.WriteFile(plugin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	kc := `apiVersion: v1
kind: Config
current-context: bad
clusters:
- name: knbox
  cluster:
    server: ` + env.URL + `
    certificate-authority-data: ` + base64.StdEncoding.EncodeToString(env.CAPEM) + `
users:
- name: bad
  user:
    token: not-the-token
- name: good
  user:
    token: ` + apiservertest.Token + `
- name: exec
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./get-token
      interactiveMode: Never
contexts:
- name: bad
  context: {cluster: knbox, user: bad}
- name: good
  context: {cluster: knbox, user: good, namespace: team-a}
- name: exec
  context: {cluster: knbox, user: exec}
`
	p := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConnectionFlags(t *testing.T) {
	t.Parallel()
	env := getEnv(t)
	kc := contextsKubeconfig(t, env)
	for _, tt := range []struct {
		name    string
		args    []string
		want    string
		wantErr string
	}{
		{"current context", nil, "", "the server has asked for the client to provide credentials (is the token in the kubeconfig the server's?)"},
		{"--context, and its namespace", []string{"--context", "good"}, "other", ""},
		{"--context and -n", []string{"--context", "good", "-n", "default"}, "hello", ""},
		{"--token", []string{"--token", apiservertest.Token}, "hello", ""},
		{"--user", []string{"--user", "good"}, "hello", ""},
		{"exec plugin", []string{"--context", "exec"}, "hello", ""},
		{"a context that does not exist", []string{"--context", "nope"}, "", `context was not found for specified context: nope`},
		{"--server", []string{"--context", "good", "--server", "https://127.0.0.1:1"}, "", "cannot reach the server at https://127.0.0.1:1: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"get", "ksvc", "-o", "jsonpath={.items[*].metadata.name}", "--kubeconfig", kc}, tt.args...)
			out, _, err := run(t, nil, "", args...)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want %s", err, tt.wantErr)
			}
			if out != tt.want {
				t.Errorf("got %q, want %q", out, tt.want)
			}
		})
	}
}

// TestKubeconfigLookup: --kubeconfig, else $KUBECONFIG (a list, as
// kubectl merges it), else the data dir's kubeconfig.
func TestKubeconfigLookup(t *testing.T) {
	dir := t.TempDir()
	env := apiservertest.Start(t, dir)
	kc := contextsKubeconfig(t, env)
	names := []string{"get", "ns", "default", "-o", "name"}
	check := func(what string, wantErr string, args ...string) {
		t.Helper()
		out, _, err := run(t, nil, "", append(names, args...)...)
		switch {
		case wantErr == "" && (err != nil || out != "namespace/default\n"):
			t.Errorf("%s: %v\n%s", what, err, out)
		case wantErr != "" && (err == nil || err.Error() != wantErr):
			t.Errorf("%s: error %v, want %s", what, err, wantErr)
		}
	}

	t.Setenv("KUBECONFIG", "")
	t.Setenv("KNBOX_DATA_DIR", "")
	check("--data-dir", "", "--data-dir", dir)
	t.Setenv("KNBOX_DATA_DIR", dir)
	check("$KNBOX_DATA_DIR", "")
	empty := t.TempDir()
	check("an empty data dir", "no kubeconfig in "+empty+": start the server first with `knbox serve --data-dir "+empty+"`", "--data-dir", empty)

	// $KUBECONFIG wins over the data dir; its missing files are skipped
	// and the first file to set a value wins.
	t.Setenv("KUBECONFIG", strings.Join([]string{filepath.Join(empty, "missing"), kc, env.Kubeconfig}, string(os.PathListSeparator)))
	check("$KUBECONFIG", "the server has asked for the client to provide credentials (is the token in the kubeconfig the server's?)", "--data-dir", empty)
	check("$KUBECONFIG and --context", "", "--context", "good", "-n", "default")
	// --kubeconfig wins over both.
	check("--kubeconfig", "", "--kubeconfig", env.Kubeconfig)
	check("--kubeconfig of a missing file", "stat "+filepath.Join(empty, "nope")+": no such file or directory", "--kubeconfig", filepath.Join(empty, "nope"))
}
