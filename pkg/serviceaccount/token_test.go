package serviceaccount

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	jose "gopkg.in/square/go-jose.v2"
	"gopkg.in/square/go-jose.v2/jwt"
)

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newSigner(t testing.TB, key *ecdsa.PrivateKey, now time.Time) *Signer {
	t.Helper()
	s, err := NewSigner(key, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return now }
	return s
}

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func claims() Claims {
	return Claims{Namespace: "team-a", ServiceAccount: "ci", ServiceAccountUID: "uid-1",
		Audiences: []string{DefaultIssuer}, Expiry: t0.Add(time.Hour)}
}

func TestSignVerify(t *testing.T) {
	s := newSigner(t, newKey(t), t0)
	c := claims()
	c.Bound = &BoundObject{Kind: "Pod", Name: "p", UID: "pod-uid"}
	tok, err := s.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	// The payload carries kube-apiserver's claims under their names.
	parts := strings.Split(tok, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]interface{}
	if err := json.Unmarshal(payload, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"iss", "sub", "aud", "exp", "iat", "nbf", "jti", "kubernetes.io"} {
		if _, ok := m[k]; !ok {
			t.Errorf("claim %s missing in %s", k, payload)
		}
	}
	if m["sub"] != "system:serviceaccount:team-a:ci" || m["iss"] != DefaultIssuer {
		t.Errorf("sub/iss: %s", payload)
	}
	k8s, _ := json.Marshal(m["kubernetes.io"])
	if want := `{"namespace":"team-a","pod":{"name":"p","uid":"pod-uid"},"serviceaccount":{"name":"ci","uid":"uid-1"}}`; string(k8s) != want {
		t.Errorf("kubernetes.io = %s, want %s", k8s, want)
	}
	header, _ := base64.RawURLEncoding.DecodeString(parts[0])
	if !strings.Contains(string(header), `"alg":"ES256"`) || !strings.Contains(string(header), `"kid":"`+s.keyID+`"`) {
		t.Errorf("header %s", header)
	}

	got, err := s.Verify(tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Namespace != "team-a" || got.ServiceAccount != "ci" || got.ServiceAccountUID != "uid-1" || got.Bound == nil ||
		*got.Bound != *c.Bound || !got.Expiry.Equal(c.Expiry) || !got.IssuedAt.Equal(t0) || got.ID == "" {
		t.Errorf("claims %+v", got)
	}
}

func TestVerifyRefuses(t *testing.T) {
	key := newKey(t)
	s := newSigner(t, key, t0)
	good, err := s.Sign(claims())
	if err != nil {
		t.Fatal(err)
	}
	other := newSigner(t, newKey(t), t0)
	otherTok, _ := other.Sign(claims())
	forAPI := claims()
	forAPI.Audiences = []string{"vault"}
	vaultTok, _ := s.Sign(forAPI)
	otherIssuer, _ := NewSigner(key, "https://elsewhere", []string{DefaultIssuer})
	otherIssuer.now = s.now
	otherIssTok, _ := otherIssuer.Sign(claims())

	// A token signed with HS256 using the public key as the secret (the
	// classic confusion attack), and one with alg none.
	pub, _ := json.Marshal(key.Public())
	hs, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: pub}, nil)
	hsTok, _ := jwt.Signed(hs).Claims(jwt.Claims{Issuer: DefaultIssuer, Subject: "system:serviceaccount:team-a:ci",
		Audience: jwt.Audience{DefaultIssuer}, Expiry: jwt.NewNumericDate(t0.Add(time.Hour))}).CompactSerialize()
	parts := strings.Split(good, ".")
	noneTok := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	// The payload of another token under this token's signature.
	swapped := parts[0] + "." + strings.Split(vaultTok, ".")[1] + "." + parts[2]

	for _, c := range []struct {
		name, token string
		now         time.Time
		audiences   []string
		why         string
	}{
		{"expired", good, t0.Add(time.Hour + 2*time.Minute), nil, "expired"},
		{"not yet valid", good, t0.Add(-2 * time.Minute), nil, "not valid yet"},
		{"another audience", vaultTok, t0, nil, "audience"},
		{"asked for another audience", good, t0, []string{"vault"}, "audience"},
		{"another key", otherTok, t0, nil, "verify"},
		{"another issuer", otherIssTok, t0, nil, "issuer"},
		{"hs256", hsTok, t0, nil, "algorithm"},
		{"alg none", noneTok, t0, nil, ""},
		{"swapped payload", swapped, t0, nil, "verify"},
		{"garbage", "a.b.c", t0, nil, ""},
		{"not a jwt", "0123456789abcdef", t0, nil, "compact"},
		{"huge", strings.Repeat("a.", MaxTokenBytes), t0, nil, "longer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.now = func() time.Time { return c.now }
			_, err := s.Verify(c.token, c.audiences)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.why) {
				t.Errorf("error %q does not say %q", err, c.why)
			}
		})
	}
	s.now = func() time.Time { return t0.Add(time.Hour + 30*time.Second) }
	if _, err := s.Verify(good, nil); err != nil {
		t.Errorf("within the leeway after expiry: %v", err)
	}
	s.now = func() time.Time { return t0 }
	if _, err := s.Verify(vaultTok, []string{"vault", "other"}); err != nil {
		t.Errorf("for its own audience: %v", err)
	}
}

func TestSignRefuses(t *testing.T) {
	s := newSigner(t, newKey(t), t0)
	for name, mutate := range map[string]func(*Claims){
		"no uid":       func(c *Claims) { c.ServiceAccountUID = "" },
		"no audience":  func(c *Claims) { c.Audiences = nil },
		"expired":      func(c *Claims) { c.Expiry = t0 },
		"bound a node": func(c *Claims) { c.Bound = &BoundObject{Kind: "Node", Name: "n", UID: "u"} },
		"too large":    func(c *Claims) { c.Audiences = []string{strings.Repeat("a", MaxTokenBytes)} },
	} {
		c := claims()
		mutate(&c)
		if _, err := s.Sign(c); err == nil {
			t.Errorf("%s: signed", name)
		}
	}
}

type fakeLookup struct {
	sas     map[string]string // ns/name -> uid
	objects map[string]string // kind/ns/name -> uid
}

func (l fakeLookup) ServiceAccountUID(ns, name string) (string, error) {
	if uid, ok := l.sas[ns+"/"+name]; ok {
		return uid, nil
	}
	return "", fmt.Errorf("serviceaccounts %q not found", name)
}

func (l fakeLookup) ObjectUID(kind, ns, name string) (string, error) {
	if uid, ok := l.objects[kind+"/"+ns+"/"+name]; ok {
		return uid, nil
	}
	return "", fmt.Errorf("%s %q not found", kind, name)
}

func TestAuthenticate(t *testing.T) {
	s := newSigner(t, newKey(t), t0)
	lookup := fakeLookup{sas: map[string]string{"team-a/ci": "uid-1"}, objects: map[string]string{"Secret/team-a/s": "s-uid", "Pod/team-a/p": "p-uid"}}
	a := NewAuthenticator(s, lookup)
	tok, _ := s.Sign(claims())
	u, err := a.Authenticate(tok)
	if err != nil {
		t.Fatal(err)
	}
	if u.GetName() != "system:serviceaccount:team-a:ci" || u.GetUID() != "uid-1" ||
		strings.Join(u.GetGroups(), ",") != "system:serviceaccounts,system:serviceaccounts:team-a" ||
		!strings.HasPrefix(u.GetExtra()[ExtraCredentialID][0], "JTI=") {
		t.Errorf("user %+v", u)
	}
	podBound := claims()
	podBound.Bound = &BoundObject{Kind: "Pod", Name: "p", UID: "p-uid"}
	tok, _ = s.Sign(podBound)
	if u, err := a.Authenticate(tok); err != nil || u.GetExtra()[ExtraPodName][0] != "p" || u.GetExtra()[ExtraPodUID][0] != "p-uid" {
		t.Errorf("pod-bound token: %v %+v", err, u)
	}

	for name, c := range map[string]Claims{
		"service account deleted":    {Namespace: "team-a", ServiceAccount: "gone", ServiceAccountUID: "uid-1"},
		"service account recreated":  {Namespace: "team-a", ServiceAccount: "ci", ServiceAccountUID: "uid-0"},
		"bound secret deleted":       {Namespace: "team-a", ServiceAccount: "ci", ServiceAccountUID: "uid-1", Bound: &BoundObject{Kind: "Secret", Name: "x", UID: "x"}},
		"bound secret recreated":     {Namespace: "team-a", ServiceAccount: "ci", ServiceAccountUID: "uid-1", Bound: &BoundObject{Kind: "Secret", Name: "s", UID: "old"}},
		"another namespace's object": {Namespace: "team-b", ServiceAccount: "ci", ServiceAccountUID: "uid-1"},
	} {
		c.Audiences, c.Expiry = []string{DefaultIssuer}, t0.Add(time.Hour)
		tok, err := s.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authenticate(tok); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func TestUsernames(t *testing.T) {
	if ns, n, ok := SplitUsername(Username("a", "b")); !ok || ns != "a" || n != "b" {
		t.Error("round trip")
	}
	for _, bad := range []string{"alice", "system:serviceaccount:", "system:serviceaccount:a", "system:serviceaccount::b", "system:serviceaccount:a:b:c"} {
		if _, _, ok := SplitUsername(bad); ok {
			t.Errorf("%q split", bad)
		}
	}
}

func TestRefreshAt(t *testing.T) {
	if got := RefreshAt(t0, t0.Add(time.Hour)); !got.Equal(t0.Add(48 * time.Minute)) {
		t.Errorf("1h token: refresh at %v", got)
	}
	if got := RefreshAt(t0, t0.Add(30*24*time.Hour)); !got.Equal(t0.Add(24 * time.Hour)) {
		t.Errorf("30d token: refresh at %v", got)
	}
}
