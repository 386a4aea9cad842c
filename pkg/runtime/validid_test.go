package runtime

import (
	"regexp"
	"strings"
	"testing"
)

// FuzzValidID: validID accepts exactly what runc's id pattern accepts.
func FuzzValidID(f *testing.F) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]{0,253}$`)
	for _, s := range []string{"", "a", "-a", ".", "a.b+c_d-e", "a\n", "é", strings.Repeat("a", 254), strings.Repeat("a", 255), "a b", "a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validID(s), re.MatchString(s); got != want {
			t.Errorf("validID(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}
