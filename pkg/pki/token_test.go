package pki

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const adminToken = "0123456789abcdef0123456789abcdef"

func writeTokenFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	file := writeTokenFile(t, strings.Join([]string{
		`alice-token,alice,uid-1,"dev,ops"`,
		`bob-token,bob,uid-2`,
		``,
		` carol-token , carol , uid-3 , " qa , , x "`,
		`dave-token,dave,uid-4,single`,
	}, "\n")+"\n")
	a, err := NewAuthenticator(adminToken, file)
	if err != nil {
		t.Fatal(err)
	}
	admin := User{Name: "admin", UID: "admin", Groups: []string{"system:masters"}}
	tests := []struct {
		name   string
		header string
		want   User
		ok     bool
	}{
		{"admin", "Bearer " + adminToken, admin, true},
		{"scheme is case-insensitive", "bearer " + adminToken, admin, true},
		{"surrounding space", "  Bearer   " + adminToken + " ", admin, true},
		{"wrong token", "Bearer not-the-token", User{}, false},
		{"prefix of the token", "Bearer " + adminToken[:len(adminToken)-1], User{}, false},
		{"token with a suffix", "Bearer " + adminToken + "x", User{}, false},
		{"missing", "", User{}, false},
		{"basic", "Basic YWRtaW46" + adminToken, User{}, false},
		{"basic scheme with the token", "Basic " + adminToken, User{}, false},
		{"bearer without token", "Bearer", User{}, false},
		{"bearer with only space", "Bearer   ", User{}, false},
		{"no scheme", adminToken, User{}, false},
		{"two tokens", "Bearer " + adminToken + " " + adminToken, User{}, false},
		{"file user with groups", "Bearer alice-token", User{Name: "alice", UID: "uid-1", Groups: []string{"dev", "ops"}}, true},
		{"file user without groups", "Bearer bob-token", User{Name: "bob", UID: "uid-2"}, true},
		{"file fields trimmed", "Bearer carol-token", User{Name: "carol", UID: "uid-3", Groups: []string{"qa", "x"}}, true},
		{"file user with one group", "Bearer dave-token", User{Name: "dave", UID: "uid-4", Groups: []string{"single"}}, true},
		{"file user name is not a token", "Bearer alice", User{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := a.Authenticate(tt.header)
			if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Authenticate(%q) = %+v, %v; want %+v, %v", tt.header, got, ok, tt.want, tt.ok)
			}
		})
	}

	// The caller cannot change the authenticator's users.
	u, _ := a.Authenticate("Bearer alice-token")
	u.Groups[0] = "system:masters"
	if u2, _ := a.Authenticate("Bearer alice-token"); u2.Groups[0] != "dev" {
		t.Errorf("groups were shared with a caller: %v", u2.Groups)
	}
}

func TestAuthenticateAdminOnly(t *testing.T) {
	t.Parallel()
	a, err := NewAuthenticator(adminToken, "")
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := a.Authenticate("Bearer " + adminToken); !ok || u.Name != AdminUser {
		t.Errorf("admin token: %+v, %v", u, ok)
	}
	if _, err := NewAuthenticator("", ""); err == nil {
		t.Error("empty admin token accepted")
	}
}

func TestTokenFileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		want    string
	}{
		{"too few columns", "a,alice,1\nb,bob\n", "line 2: want at least 3 columns"},
		{"one column", "\n\nlonely\n", "line 3: want at least 3 columns"},
		{"bare quote", "a,alice,1\nb,bo\"b,2\n", "line 2:"},
		{"unterminated quote", "a,alice,1\nb,bob,2\nc,carol,3,\"g1,g2\n", "line 3:"},
		{"empty token", "a,alice,1\n,bob,2\n", "line 2: empty token"},
		{"empty user", "a,alice,1\nb,,2\n", "line 2: empty user name"},
		{"space in token", "a b,alice,1\n", "line 1: token contains whitespace"},
		{"duplicate token", "a,alice,1\nb,bob,2\na,carol,3\n", "line 3: token already given on line 1"},
		{"admin token", "x,alice,1\n" + adminToken + ",mallory,2\n", "line 2: token is the admin token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeTokenFile(t, tt.content)
			_, err := NewAuthenticator(adminToken, path)
			if err == nil {
				t.Fatalf("accepted %q", tt.content)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q: want it to contain %q and the file name", err, tt.want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "nope.csv")
		if _, err := NewAuthenticator(adminToken, path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("err = %v, want one naming %s", err, path)
		}
	})
}

func FuzzTokenFile(f *testing.F) {
	for _, seed := range []string{
		"",
		"a,alice,1\n",
		"a,alice,1,\"g1,g2\"\n",
		"a,alice,1\nb,bob,2,ops\n",
		"\"a\"\"b\",x,y\n",
		"a,alice,1\r\nb,bob,2\r\n",
		"a,b\n",
		"\"unterminated,b,c\n",
		" t , u , i , \" g , h \" , extra\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, content string) {
		tokens, err := parseTokenFile(strings.NewReader(content))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Fatalf("error %q does not name a line", err)
			}
			return
		}
		a := &Authenticator{}
		a.add(adminToken, User{Name: AdminUser})
		seen := map[string]bool{}
		for _, tok := range tokens {
			if tok.token == "" || hasSpace(tok.token) || tok.user.Name == "" {
				t.Fatalf("accepted an invalid entry %+v", tok)
			}
			if seen[tok.token] {
				t.Fatalf("accepted duplicate token %q", tok.token)
			}
			seen[tok.token] = true
			for _, g := range tok.user.Groups {
				if g == "" || g != strings.TrimSpace(g) {
					t.Fatalf("group %q not trimmed", g)
				}
			}
			if tok.token != adminToken {
				a.add(tok.token, tok.user)
			}
		}
		for _, tok := range tokens {
			if tok.token == adminToken {
				continue
			}
			u, ok := a.Authenticate("Bearer " + tok.token)
			if !ok || !reflect.DeepEqual(u, tok.user) {
				t.Fatalf("token %q: got %+v, %v; want %+v", tok.token, u, ok, tok.user)
			}
		}
	})
}
