package pki

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode"
)

// Admin identity of the token that Ensure creates.
const (
	AdminUser  = "admin"
	AdminGroup = "system:masters"
)

// User is an authenticated identity.
type User struct {
	Name, UID string
	Groups    []string
}

// Authenticator maps bearer tokens to users: the admin token plus, as an
// option, the tokens of a static token file.
type Authenticator struct {
	entries []tokenEntry
}

type tokenEntry struct {
	digest [sha256.Size]byte
	user   User
}

// NewAuthenticator returns an Authenticator for adminToken, which maps to
// user "admin" in group "system:masters", and for the tokens in tokenFile
// ("" for none). tokenFile has kube-apiserver's --token-auth-file format:
// CSV lines of token,user,uid[,"group1,group2"].
func NewAuthenticator(adminToken string, tokenFile string) (*Authenticator, error) {
	if adminToken == "" {
		return nil, errors.New("admin token is empty")
	}
	a := &Authenticator{}
	a.add(adminToken, User{Name: AdminUser, UID: AdminUser, Groups: []string{AdminGroup}})
	if tokenFile == "" {
		return a, nil
	}
	f, err := os.Open(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	tokens, err := parseTokenFile(f)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", tokenFile, err)
	}
	for _, t := range tokens {
		if subtle.ConstantTimeCompare([]byte(t.token), []byte(adminToken)) == 1 {
			return nil, fmt.Errorf("token file %s: line %d: token is the admin token", tokenFile, t.line)
		}
		a.add(t.token, t.user)
	}
	return a, nil
}

func (a *Authenticator) add(token string, u User) {
	a.entries = append(a.entries, tokenEntry{digest: sha256.Sum256([]byte(token)), user: u})
}

// Authenticate checks an Authorization header value of the form
// "Bearer <token>". It returns ok=false for a missing, malformed or unknown
// token. Tokens are compared by their SHA-256 digests in constant time, and
// every known token is compared, so the time taken tells nothing about which
// token, or how much of one, matched.
func (a *Authenticator) Authenticate(authorizationHeader string) (User, bool) {
	scheme, token, found := strings.Cut(strings.TrimSpace(authorizationHeader), " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return User{}, false
	}
	token = strings.TrimLeft(token, " ")
	if token == "" || hasSpace(token) {
		return User{}, false
	}
	digest := sha256.Sum256([]byte(token))
	match := -1
	for i := range a.entries {
		eq := subtle.ConstantTimeCompare(digest[:], a.entries[i].digest[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return User{}, false
	}
	u := a.entries[match].user
	u.Groups = slices.Clone(u.Groups)
	return u, true
}

type fileToken struct {
	token string
	user  User
	line  int
}

// parseTokenFile reads kube-apiserver's static token CSV. Unlike
// kube-apiserver, which warns and goes on, it rejects empty tokens and
// duplicate tokens: a file that grants access should mean one thing. It is
// more lenient only about space around fields, which it trims.
func parseTokenFile(r io.Reader) ([]fileToken, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	seen := map[string]int{}
	var out []fileToken
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			var perr *csv.ParseError
			if errors.As(err, &perr) {
				return nil, fmt.Errorf("line %d: %w", perr.Line, perr.Err)
			}
			return nil, err
		}
		line, _ := cr.FieldPos(0)
		if len(rec) < 3 {
			return nil, fmt.Errorf("line %d: want at least 3 columns (token, user name, user uid), found %d", line, len(rec))
		}
		token, name, uid := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1]), strings.TrimSpace(rec[2])
		switch {
		case token == "":
			return nil, fmt.Errorf("line %d: empty token", line)
		case hasSpace(token):
			return nil, fmt.Errorf("line %d: token contains whitespace", line)
		case name == "":
			return nil, fmt.Errorf("line %d: empty user name", line)
		}
		if prev, ok := seen[token]; ok {
			return nil, fmt.Errorf("line %d: token already given on line %d", line, prev)
		}
		seen[token] = line
		u := User{Name: name, UID: uid}
		if len(rec) > 3 {
			for _, g := range strings.Split(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					u.Groups = append(u.Groups, g)
				}
			}
		}
		out = append(out, fileToken{token: token, user: u, line: line})
	}
}

func hasSpace(s string) bool { return strings.IndexFunc(s, unicode.IsSpace) >= 0 }

// UserToken returns the token of the user name in a token file (the first
// line naming that user), for `knbox kubeconfig --user`.
func UserToken(tokenFile, name string) (string, User, error) {
	f, err := os.Open(tokenFile)
	if err != nil {
		return "", User{}, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	tokens, err := parseTokenFile(f)
	if err != nil {
		return "", User{}, fmt.Errorf("token file %s: %w", tokenFile, err)
	}
	for _, t := range tokens {
		if t.user.Name == name {
			return t.token, t.user, nil
		}
	}
	return "", User{}, fmt.Errorf("token file %s has no user %q", tokenFile, name)
}
