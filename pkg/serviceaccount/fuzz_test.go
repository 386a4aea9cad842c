package serviceaccount

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"reflect"
	"testing"
	"time"
)

// fixedKey is a deterministic key, so the fuzz corpus's seeds stay valid.
func fixedKey() *ecdsa.PrivateKey {
	d := sha256.Sum256([]byte("knbox fuzz key for token parsing"))
	k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d[:])
	if err != nil {
		panic(err)
	}
	return k
}

// FuzzVerify feeds arbitrary bearer tokens to Verify and Authenticate: they
// must not panic, and a token is accepted only with the claims that were
// signed (a fuzzer cannot forge the signature, so any other claims mean a
// parsing hole).
func FuzzVerify(f *testing.F) {
	s, err := NewSigner(fixedKey(), "", nil)
	if err != nil {
		f.Fatal(err)
	}
	s.now = func() time.Time { return t0 }
	c := claims()
	c.ID = "fixed"
	c.IssuedAt = t0
	signed, err := s.Sign(c)
	if err != nil {
		f.Fatal(err)
	}
	want, err := s.Verify(signed, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(signed)
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("a.b.c")
	f.Add(`{"payload":"e30","signatures":[]}`)
	a := NewAuthenticator(s, fakeLookup{sas: map[string]string{"team-a/ci": "uid-1"}})
	f.Fuzz(func(t *testing.T, token string) {
		got, err := s.Verify(token, nil)
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("accepted %q with claims %+v", token, got)
		}
		u, err := a.Authenticate(token)
		if err == nil && u.GetName() != "system:serviceaccount:team-a:ci" {
			t.Fatalf("authenticated %q as %s", token, u.GetName())
		}
	})
}
