package pki

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// versionServer answers /version for the admin token only, as knbox's API
// server will.
func versionServer(t *testing.T, c *Credentials) string {
	t.Helper()
	auth, err := NewAuthenticator(c.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := newTLSServer(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := auth.Authenticate(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`)
			return
		}
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"major": "1", "minor": "29", "gitVersion": "v1.29.0+test", "user": u.Name})
	}))
	return srv.URL
}

func TestKubeconfigLoadsAndConnects(t *testing.T) {
	t.Parallel()
	c, err := Ensure(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	server := versionServer(t, c)
	out, err := Kubeconfig(server, c.CACertPEM, c.Token)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "kind: Config") || !strings.Contains(string(out), "current-context: knbox") {
		t.Errorf("not a YAML kubeconfig:\n%s", out)
	}

	cfg, err := clientcmd.Load(out)
	if err != nil {
		t.Fatalf("clientcmd.Load: %v\n%s", err, out)
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if cfg.CurrentContext != "knbox" || kctx == nil || kctx.Namespace != "default" {
		t.Fatalf("current context %q: %+v", cfg.CurrentContext, kctx)
	}
	cluster, user := cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo]
	if kctx.Cluster != "knbox" || cluster == nil || kctx.AuthInfo != "knbox-admin" || user == nil {
		t.Fatalf("context points at cluster %q, user %q", kctx.Cluster, kctx.AuthInfo)
	}
	if cluster.Server != server || string(cluster.CertificateAuthorityData) != string(c.CACertPEM) || user.Token != c.Token {
		t.Fatalf("cluster %+v user %+v", cluster, user)
	}

	// Build a rest.Config as kubectl and client-go programs do, and use it:
	// CA trust and bearer token both come from the kubeconfig.
	cc := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{})
	if ns, _, err := cc.Namespace(); err != nil || ns != "default" {
		t.Errorf("namespace = %q, %v", ns, err)
	}
	restCfg, err := cc.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if restCfg.Host != server || restCfg.BearerToken != c.Token {
		t.Errorf("rest.Config host %q token %q", restCfg.Host, restCfg.BearerToken)
	}
	hc, err := rest.HTTPClientFor(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(server + "/version")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"user":"admin"`) {
		t.Fatalf("GET /version: %d %s", resp.StatusCode, body)
	}
}

// TestKubeconfigWithKubectl hands the kubeconfig to the real kubectl.
func TestKubeconfigWithKubectl(t *testing.T) {
	t.Parallel()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed (hack/install-deps.sh installs it; CI runs it)")
	}
	c, err := Ensure(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	server := versionServer(t, c)
	out, err := Kubeconfig(server, c.CACertPEM, c.Token)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	path := filepath.Join(home, "kubeconfig")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", path, "get", "--raw", "/version")
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl: %v\n%s", err, got)
	}
	if !strings.Contains(string(got), `"user":"admin"`) {
		t.Errorf("kubectl output: %s", got)
	}

	// The wrong token is refused: kubectl really sends the kubeconfig's.
	bad, err := Kubeconfig(server, c.CACertPEM, "wrong")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd = exec.CommandContext(ctx, kubectl, "--kubeconfig", path, "get", "--raw", "/version")
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	if got, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("kubectl with a wrong token succeeded: %s", got)
	}
}

func TestKubeconfigRejectsBadInput(t *testing.T) {
	t.Parallel()
	c, err := Ensure(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, server string
		ca           []byte
		token        string
	}{
		{"http server", "http://127.0.0.1:6443", c.CACertPEM, c.Token},
		{"no host", "https://", c.CACertPEM, c.Token},
		{"not a URL", "://x", c.CACertPEM, c.Token},
		{"no CA", "https://127.0.0.1:6443", nil, c.Token},
		{"CA not PEM", "https://127.0.0.1:6443", []byte("junk"), c.Token},
		{"no token", "https://127.0.0.1:6443", c.CACertPEM, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Kubeconfig(tt.server, tt.ca, tt.token); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestKubeconfigForUser(t *testing.T) {
	t.Parallel()
	c, err := Ensure(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	file := writeTokenFile(t, "t-admin2,ops,1,\"system:masters\"\nt-alice,alice,2,\"devs,viewers\"\nt-alice2,alice,2\n")
	token, u, err := UserToken(file, "alice")
	if err != nil || token != "t-alice" || strings.Join(u.Groups, ",") != "devs,viewers" {
		t.Fatalf("UserToken: %q %+v %v", token, u, err)
	}
	if _, _, err := UserToken(file, "mallory"); err == nil || !strings.Contains(err.Error(), `no user "mallory"`) {
		t.Errorf("unknown user: %v", err)
	}
	out, err := KubeconfigFor("https://127.0.0.1:6443", c.CACertPEM, "alice", token, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if cfg.CurrentContext != "alice@knbox" || ctx.AuthInfo != "alice" || ctx.Namespace != "team-a" || cfg.AuthInfos["alice"].Token != "t-alice" {
		t.Errorf("kubeconfig for alice:\n%s", out)
	}
	if _, err := KubeconfigFor("https://127.0.0.1:6443", c.CACertPEM, "", token, ""); err == nil {
		t.Error("no user name: no error")
	}
}
