package apiserver

import (
	"errors"
	"net/url"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// FuzzContinueToken: any continue token (and limit) is either refused
// with a 400 or read as a position and revision that encode back to a
// token read the same way.
func FuzzContinueToken(f *testing.F) {
	for _, s := range []struct {
		ns, start string
		across    bool
		rev       int64
	}{{"default", "a\x00", false, 5}, {"b", "x\x00", true, 9}, {"", "name\x00", false, -1}, {"ns", "", true, 1}} {
		tok, err := encodeContinue(s.ns, s.start, s.across, s.rev)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tok, "2", s.across)
	}
	f.Add("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiIuLi94In0", "1", true)
	f.Add("!!!", "x", false)
	f.Add("", "-1", false)
	f.Fuzz(func(t *testing.T, token, limit string, across bool) {
		q := url.Values{"continue": {token}, "limit": {limit}}
		p, err := parsePaging(q, "default", across, 100)
		if err != nil {
			var se apierrors.APIStatus
			if !errors.As(err, &se) || se.Status().Code != 400 {
				t.Fatalf("token %q limit %q: %v, want a 400", token, limit, err)
			}
			return
		}
		if p.opts.Limit < 0 || p.opts.Revision < 0 {
			t.Fatalf("token %q: %+v", token, p.opts)
		}
		if token == "" {
			return
		}
		rev := p.opts.Revision
		if rev == 0 {
			rev = -1
		}
		again, err := encodeContinue(p.opts.StartNamespace, p.opts.StartName, across, rev)
		if err != nil {
			t.Fatal(err)
		}
		ns, start, rev2, err := decodeContinue(again, "default", across)
		if err != nil || ns != p.opts.StartNamespace || start != p.opts.StartName || rev2 != rev {
			t.Fatalf("token %q: re-encoded %q reads (%q, %q, %d), %v; want (%q, %q, %d)", token, again, ns, start, rev2, err,
				p.opts.StartNamespace, p.opts.StartName, rev)
		}
	})
}
