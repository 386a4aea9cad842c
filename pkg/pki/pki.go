// Package pki creates and loads the credentials of knbox's API server: a CA,
// a serving certificate signed by it, bearer tokens, and kubeconfigs for
// clients. It owns the files in the credentials directory and nothing else;
// it must not import other knbox packages.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// File names inside the credentials directory.
const (
	CACertName     = "ca.crt"
	CAKeyName      = "ca.key"
	ServerCertName = "apiserver.crt"
	ServerKeyName  = "apiserver.key"
	TokenName      = "token"
	// ServiceAccountKeyName is the key that signs ServiceAccount tokens
	// (kube-apiserver's --service-account-signing-key-file).
	ServiceAccountKeyName = "sa.key"
)

const (
	caValidity     = 10 * 365 * 24 * time.Hour
	serverValidity = 365 * 24 * time.Hour
	// renewBefore: a serving certificate that expires sooner than this is
	// re-issued at start.
	renewBefore = 30 * 24 * time.Hour
	// backdate covers small clock differences between knbox and its clients.
	backdate = time.Hour

	tokenBytes = 32
)

// Credentials are the API server's credentials as files on disk.
type Credentials struct {
	// CACertPEM is the CA certificate, for kubeconfigs and client trust.
	CACertPEM []byte
	// CertFile and KeyFile are the serving certificate and its key.
	CertFile, KeyFile string
	// Token is the admin bearer token.
	Token string
	// CAFile is the path of CACertPEM.
	CAFile string
	// ServiceAccountKey signs ServiceAccount tokens (ES256). Replacing the
	// file invalidates every token issued with the old key.
	ServiceAccountKey *ecdsa.PrivateKey
}

// Ensure creates, on first start, the CA, the serving certificate, the
// admin token and the ServiceAccount signing key in dir, and reuses them
// later. The serving certificate covers
// localhost, 127.0.0.1 and ::1 plus hosts (DNS names or IP addresses); it is
// re-issued with the same CA when it lacks a requested host, expires within
// 30 days, or no longer matches its key or the CA.
//
// Private keys and the token must be readable by their owner only: an
// existing one with group or other permission bits makes Ensure fail with an
// error naming the file and its mode. Tightening the mode silently would hide
// that the secret may already have been read by someone else; the operator
// has to decide whether to rotate it.
func Ensure(dir string, hosts []string) (*Credentials, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("credentials directory %s: %w", dir, err)
	}
	dnsNames, ips, err := sans(hosts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create credentials directory %s: %w", dir, err)
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	for _, name := range []string{CAKeyName, ServerKeyName, TokenName, ServiceAccountKeyName} {
		if err := checkPrivate(p(name)); err != nil {
			return nil, err
		}
	}

	now := time.Now()
	caCert, caKey, caPEM, err := ensureCA(p(CACertName), p(CAKeyName), now)
	if err != nil {
		return nil, err
	}
	if err := ensureServing(p(ServerCertName), p(ServerKeyName), caCert, caKey, dnsNames, ips, now); err != nil {
		return nil, err
	}
	token, err := ensureToken(p(TokenName))
	if err != nil {
		return nil, err
	}
	saKey, err := ensureServiceAccountKey(p(ServiceAccountKeyName))
	if err != nil {
		return nil, err
	}
	return &Credentials{
		CACertPEM:         caPEM,
		CertFile:          p(ServerCertName),
		KeyFile:           p(ServerKeyName),
		Token:             token,
		CAFile:            p(CACertName),
		ServiceAccountKey: saKey,
	}, nil
}

// ensureServiceAccountKey reads the ServiceAccount signing key, creating
// a P-256 key on first start.
func ensureServiceAccountKey(path string) (*ecdsa.PrivateKey, error) {
	key, err := readKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generate service account key: %w", err)
		}
		if err := writeKey(path, k); err != nil {
			return nil, err
		}
		return k, nil
	}
	if err != nil {
		return nil, err
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%s: want an ECDSA P-256 key (ES256), found %T; delete it so that knbox creates one (tokens signed with it stop working)", path, key)
	}
	return ec, nil
}

// sans returns the subject alternative names the serving certificate must
// hold: the loopback names plus hosts, deduplicated, in a stable order.
func sans(hosts []string) ([]string, []net.IP, error) {
	dnsNames := []string{"localhost"}
	ips := []net.IP{net.ParseIP("127.0.0.1").To4(), net.IPv6loopback}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); ip != nil {
			if v4 := ip.To4(); v4 != nil {
				ip = v4
			}
			if !containsIP(ips, ip) {
				ips = append(ips, ip)
			}
			continue
		}
		name := strings.ToLower(strings.TrimSuffix(h, "."))
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			if werrs := validation.IsWildcardDNS1123Subdomain(name); len(werrs) > 0 {
				return nil, nil, fmt.Errorf("api host %q is neither an IP address nor a DNS name: %s", h, strings.Join(errs, "; "))
			}
		}
		if !containsString(dnsNames, name) {
			dnsNames = append(dnsNames, name)
		}
	}
	return dnsNames, ips, nil
}

// checkPrivate refuses a secret file that group or others may access.
func checkPrivate(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o: a private key or token must not be accessible by group or others; "+
			"if it may have been read, delete it so that knbox creates a new one, else run chmod 600 %s", path, perm, path)
	}
	return nil
}

func ensureCA(certPath, keyPath string, now time.Time) (*x509.Certificate, crypto.Signer, []byte, error) {
	certPEM, err := os.ReadFile(certPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No CA certificate: nobody can trust this CA yet, so (re)create it.
		// This also recovers from a crash between writing ca.key and ca.crt.
		return createCA(certPath, keyPath, now)
	case err != nil:
		return nil, nil, nil, fmt.Errorf("read %s: %w", certPath, err)
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parse %s: %w", certPath, err)
	}
	if !cert.IsCA {
		return nil, nil, nil, fmt.Errorf("%s is not a CA certificate", certPath)
	}
	if !now.Before(cert.NotAfter) {
		return nil, nil, nil, fmt.Errorf("CA certificate %s expired on %s; delete the credentials directory to create a new CA (clients must then fetch a new kubeconfig)",
			certPath, cert.NotAfter.Format(time.RFC3339))
	}
	key, err := readKey(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		// Replacing the CA would break every client that trusts it.
		return nil, nil, nil, fmt.Errorf("CA key %s is missing but %s exists; restore the key or delete both", keyPath, certPath)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if !samePublicKey(cert.PublicKey, key.Public()) {
		return nil, nil, nil, fmt.Errorf("CA key %s does not match %s", keyPath, certPath)
	}
	return cert, key, certPEM, nil
}

func createCA(certPath, keyPath string, now time.Time) (*x509.Certificate, crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("knbox-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parse new CA certificate: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	// Key first: a crash before the certificate is written leaves no
	// ca.crt, and the next start creates a new CA.
	if err := writeKey(keyPath, key); err != nil {
		return nil, nil, nil, err
	}
	if err := writeFileAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, nil, nil, err
	}
	return cert, key, certPEM, nil
}

func ensureServing(certPath, keyPath string, ca *x509.Certificate, caKey crypto.Signer, dnsNames []string, ips []net.IP, now time.Time) error {
	ok, err := servingUsable(certPath, keyPath, ca, dnsNames, ips, now)
	if err != nil || ok {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key for %s: %w", certPath, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "knbox-apiserver"},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(serverValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	if tmpl.NotAfter.After(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("create %s: %w", certPath, err)
	}
	// Key first; a crash in between leaves a certificate that does not match
	// its key, which the next start re-issues.
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	return writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// servingUsable tells whether the serving certificate on disk can be kept.
// A missing file, a mismatched key, another CA, a missing host or a near
// expiry mean re-issue; a file that cannot be read or parsed is an error.
func servingUsable(certPath, keyPath string, ca *x509.Certificate, dnsNames []string, ips []net.IP, now time.Time) (bool, error) {
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", certPath, err)
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return false, fmt.Errorf("parse %s: %w", certPath, err)
	}
	key, err := readKey(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	switch {
	case !samePublicKey(cert.PublicKey, key.Public()):
		return false, nil
	case cert.CheckSignatureFrom(ca) != nil:
		return false, nil
	case cert.NotAfter.Before(now.Add(renewBefore)):
		return false, nil
	}
	for _, name := range dnsNames {
		if !containsString(cert.DNSNames, name) {
			return false, nil
		}
	}
	for _, ip := range ips {
		if !containsIP(cert.IPAddresses, ip) {
			return false, nil
		}
	}
	return true, nil
}

func ensureToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		raw := make([]byte, tokenBytes)
		if _, err := rand.Read(raw); err != nil {
			return "", fmt.Errorf("generate token: %w", err)
		}
		token := hex.EncodeToString(raw)
		if err := writeFileAtomic(path, []byte(token+"\n"), 0o600); err != nil {
			return "", err
		}
		return token, nil
	case err != nil:
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" || hasSpace(token) || strings.Contains(token, ",") {
		return "", fmt.Errorf("%s must hold one token without spaces or commas", path)
	}
	return token, nil
}

func parseCert(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(block.Bytes)
}

func readKey(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("parse %s: no PEM block", path)
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("parse %s: unexpected PEM block %q", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("parse %s: %T is not a signing key", path, key)
	}
	return signer, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory and a rename, so a reader sees the old or the new file whole.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	// CreateTemp makes the file 0600; set the final mode before any byte of
	// a secret is written.
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// Make the rename durable.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

func samePublicKey(a, b crypto.PublicKey) bool {
	ad, err := x509.MarshalPKIXPublicKey(a)
	if err != nil {
		return false
	}
	bd, err := x509.MarshalPKIXPublicKey(b)
	if err != nil {
		return false
	}
	return bytes.Equal(ad, bd)
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

func containsIP(list []net.IP, ip net.IP) bool {
	for _, v := range list {
		if v.Equal(ip) {
			return true
		}
	}
	return false
}

// InClusterHosts are the names by which clients inside instances reach the
// API, as pods reach kube-apiserver on a cluster through the Service
// "kubernetes" in "default": kubernetes, kubernetes.default,
// kubernetes.default.svc and kubernetes.default.svc.<clusterDomain>. The
// serving certificate must hold them (Ensure's hosts) for client-go's
// in-cluster configuration to verify the server.
func InClusterHosts(clusterDomain string) []string {
	clusterDomain = strings.TrimSuffix(clusterDomain, ".")
	if clusterDomain == "" {
		clusterDomain = "cluster.local"
	}
	return []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + clusterDomain}
}
