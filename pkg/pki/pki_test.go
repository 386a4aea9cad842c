package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range []string{CACertName, CAKeyName, ServerCertName, ServerKeyName, TokenName} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	return out
}

func loadCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseCert(b)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return c
}

func TestEnsureCreatesThenReuses(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "pki")
	c1, err := Ensure(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := readFiles(t, dir)

	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("dir mode = %04o, want 0700", perm)
	}
	for _, name := range []string{CAKeyName, ServerKeyName, TokenName, ServiceAccountKeyName} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s mode = %04o, want 0600", name, perm)
		}
	}
	if len(c1.Token) != 2*tokenBytes {
		t.Errorf("token %q: want %d hex characters", c1.Token, 2*tokenBytes)
	}
	if string(c1.CACertPEM) != first[CACertName] {
		t.Error("CACertPEM differs from ca.crt")
	}
	if c1.CAFile != filepath.Join(dir, CACertName) || c1.CertFile != filepath.Join(dir, ServerCertName) || c1.KeyFile != filepath.Join(dir, ServerKeyName) {
		t.Errorf("paths: %+v", c1)
	}

	c2, err := Ensure(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	second := readFiles(t, dir)
	for name := range first {
		if first[name] != second[name] {
			t.Errorf("%s changed on the second Ensure", name)
		}
	}
	if c1.Token != c2.Token {
		t.Error("token changed on the second Ensure")
	}
	if c1.ServiceAccountKey == nil || !c1.ServiceAccountKey.Equal(c2.ServiceAccountKey) {
		t.Error("service account key missing or changed on the second Ensure")
	}
	matches, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(matches) > 0 {
		t.Errorf("temporary files left behind: %v", matches)
	}
}

func TestEnsureReissuesForMissingHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Ensure(dir, nil); err != nil {
		t.Fatal(err)
	}
	before := readFiles(t, dir)

	hosts := []string{"KnBox.Example.", "192.0.2.10", "[2001:db8::1]"}
	if _, err := Ensure(dir, hosts); err != nil {
		t.Fatal(err)
	}
	after := readFiles(t, dir)
	if before[ServerCertName] == after[ServerCertName] || before[ServerKeyName] == after[ServerKeyName] {
		t.Fatal("serving certificate not re-issued for a new host")
	}
	for _, name := range []string{CACertName, CAKeyName, TokenName} {
		if before[name] != after[name] {
			t.Errorf("%s changed; only the serving certificate should", name)
		}
	}
	cert := loadCert(t, filepath.Join(dir, ServerCertName))
	for _, h := range []string{"knbox.example", "192.0.2.10", "2001:db8::1", "localhost", "127.0.0.1", "::1"} {
		if err := cert.VerifyHostname(h); err != nil {
			t.Errorf("re-issued certificate: %v", err)
		}
	}
	ca := loadCert(t, filepath.Join(dir, CACertName))
	if err := cert.CheckSignatureFrom(ca); err != nil {
		t.Errorf("re-issued certificate not signed by the same CA: %v", err)
	}

	// Same hosts again, and a subset: nothing to do.
	for _, hs := range [][]string{hosts, {"192.0.2.10"}} {
		if _, err := Ensure(dir, hs); err != nil {
			t.Fatal(err)
		}
		if again := readFiles(t, dir); again[ServerCertName] != after[ServerCertName] {
			t.Errorf("hosts %v: certificate re-issued although it covers them", hs)
		}
	}
}

func TestEnsureReissuesNearExpiry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Ensure(dir, nil); err != nil {
		t.Fatal(err)
	}
	// Replace the serving certificate with one that expires in 10 days.
	ca := loadCert(t, filepath.Join(dir, CACertName))
	caKey, err := readKey(filepath.Join(dir, CAKeyName))
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: mustSerial(t),
		Subject:      pkix.Name{CommonName: "short"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeKey(filepath.Join(dir, ServerKeyName), key); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(filepath.Join(dir, ServerCertName), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}

	if _, err := Ensure(dir, nil); err != nil {
		t.Fatal(err)
	}
	cert := loadCert(t, filepath.Join(dir, ServerCertName))
	if left := time.Until(cert.NotAfter); left < 300*24*time.Hour {
		t.Errorf("certificate not renewed: expires in %v", left)
	}
}

func TestEnsureReissuesWhenKeyMissing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Ensure(dir, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, ServerKeyName)); err != nil {
		t.Fatal(err)
	}
	c, err := Ensure(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
		t.Errorf("re-issued pair does not load: %v", err)
	}
}

func TestEnsureRefusesLoosePermissions(t *testing.T) {
	t.Parallel()
	for _, name := range []string{CAKeyName, ServerKeyName, TokenName, ServiceAccountKeyName} {
		for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
			t.Run(name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				if _, err := Ensure(dir, nil); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(dir, name)
				if err := os.Chmod(path, mode); err != nil {
					t.Fatal(err)
				}
				_, err := Ensure(dir, nil)
				if err == nil {
					t.Fatalf("Ensure accepted %s with mode %04o", name, mode)
				}
				for _, want := range []string{path, fmt.Sprintf("%04o", mode)} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %q", err, want)
					}
				}
				// Nothing was rewritten or tightened behind the operator's back.
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != mode {
					t.Errorf("mode changed to %04o", fi.Mode().Perm())
				}
			})
		}
	}
}

func TestEnsureErrors(t *testing.T) {
	t.Parallel()
	t.Run("bad host", func(t *testing.T) {
		t.Parallel()
		_, err := Ensure(t.TempDir(), []string{"not a host!"})
		if err == nil || !strings.Contains(err.Error(), `"not a host!"`) {
			t.Fatalf("err = %v, want one naming the host", err)
		}
	})
	t.Run("missing CA key", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if _, err := Ensure(dir, nil); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, CAKeyName)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		_, err := Ensure(dir, nil)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("err = %v, want one naming %s", err, path)
		}
	})
	t.Run("corrupt CA certificate", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if _, err := Ensure(dir, nil); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, CACertName)
		if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Ensure(dir, nil)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("err = %v, want one naming %s", err, path)
		}
	})
	t.Run("empty token file", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if _, err := Ensure(dir, nil); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, TokenName)
		if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Ensure(dir, nil)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("err = %v, want one naming %s", err, path)
		}
	})
	t.Run("service account key of another kind", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if _, err := Ensure(dir, nil); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, ServiceAccountKeyName)
		rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
		if err != nil {
			t.Fatal(err)
		}
		der, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = Ensure(dir, nil)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "P-256") {
			t.Fatalf("err = %v, want one naming %s and the key it wants", err, path)
		}
	})
	t.Run("directory is a file", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Ensure(path, nil)
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("err = %v, want one naming %s", err, path)
		}
	})
}

func TestEnsureCAMissingCertStartsOver(t *testing.T) {
	t.Parallel()
	// A crash after ca.key was written but before ca.crt: start over.
	dir := t.TempDir()
	if _, err := Ensure(dir, nil); err != nil {
		t.Fatal(err)
	}
	before := readFiles(t, dir)
	if err := os.Remove(filepath.Join(dir, CACertName)); err != nil {
		t.Fatal(err)
	}
	c, err := Ensure(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	after := readFiles(t, dir)
	if before[CACertName] == after[CACertName] || before[ServerCertName] == after[ServerCertName] {
		t.Fatal("CA and serving certificate should both be new")
	}
	if err := loadCert(t, c.CertFile).CheckSignatureFrom(loadCert(t, c.CAFile)); err != nil {
		t.Fatal(err)
	}
}

func TestCertificateVerifiesAgainstCA(t *testing.T) {
	t.Parallel()
	c, err := Ensure(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.CACertPEM) {
		t.Fatal("CA PEM not accepted")
	}
	cert := loadCert(t, c.CertFile)
	for _, host := range []string{"127.0.0.1", "localhost", "::1"} {
		if _, err := cert.Verify(x509.VerifyOptions{
			DNSName:   host,
			Roots:     roots,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots}); err == nil {
		t.Error("certificate verified for a host it does not cover")
	}
	ca := loadCert(t, c.CAFile)
	if got := ca.NotAfter.Sub(ca.NotBefore); got < caValidity {
		t.Errorf("CA valid for %v, want at least %v", got, caValidity)
	}
	if got := cert.NotAfter.Sub(cert.NotBefore); got < serverValidity || got > serverValidity+2*backdate {
		t.Errorf("serving certificate valid for %v, want about %v", got, serverValidity)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("serving key is %T, want ECDSA P-256", cert.PublicKey)
	}
}

// newTLSServer serves h over TLS with the credentials' serving certificate.
func newTLSServer(t *testing.T, c *Credentials, h http.Handler) *httptest.Server {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	// Handshakes that tests make fail on purpose are not worth a log line.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestTLSRoundTrip(t *testing.T) {
	t.Parallel()
	c, err := Ensure(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := newTLSServer(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello over tls")
	}))

	caPEM, err := os.ReadFile(c.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	t.Cleanup(client.CloseIdleConnections)

	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
	for _, url := range []string{srv.URL, "https://localhost:" + port} {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hello over tls" {
			t.Errorf("GET %s: body %q", url, body)
		}
	}

	// A client that does not trust the CA must fail the handshake.
	other := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: x509.NewCertPool()}}}
	if resp, err := other.Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Fatal("a client without the CA completed the handshake")
	}
}

func mustSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := serialNumber()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestInClusterHosts: a certificate issued for InClusterHosts and the
// instance-side address verifies for every name a pod's client uses
// (client-go's in-cluster configuration dials KUBERNETES_SERVICE_HOST),
// against the CA alone.
func TestInClusterHosts(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "pki")
	creds, err := Ensure(dir, append(InClusterHosts("example.internal."), "127.0.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(creds.CACertPEM)
	cert := loadCert(t, creds.CertFile)
	for _, h := range []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.example.internal", "127.0.0.2", "localhost"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: h, Roots: pool}); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	if got := InClusterHosts(""); got[3] != "kubernetes.default.svc.cluster.local" {
		t.Errorf("default domain: %v", got)
	}
}
