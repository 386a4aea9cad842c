package network

import (
	"regexp"
	"strings"
	"testing"
)

// FuzzValidName: validName accepts exactly what its pattern accepts.
func FuzzValidName(f *testing.F) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$`)
	for _, s := range []string{"", "a", "-a", ".", "..", "a.b_c-d", "a+b", "a\n", "é", strings.Repeat("a", 253), strings.Repeat("a", 254), "a b", "a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validName(s), re.MatchString(s); got != want {
			t.Errorf("validName(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}
