package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeCredentials: first start generates the CA, serving certificate
// and token into the data dir, private files are 0600, the certificate
// verifies against the CA, and a request without the right token gets 401.
func TestServeCredentials(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir, "")
	for _, f := range []string{"token", "ca.key", "apiserver.key", "kubeconfig"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	token, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		auth string
		code int
	}{{"", 401}, {"Bearer wrong", 401}, {"Bearer " + strings.TrimSpace(string(token)), 200}} {
		req, _ := http.NewRequest("GET", "https://"+srv.apiAddr+"/api/v1/namespaces", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := client.Do(req) // verifies the serving certificate against ca.crt
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("auth %q: %d, want %d", c.auth, resp.StatusCode, c.code)
		}
	}
}
