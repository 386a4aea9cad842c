package oci

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// expand replaces $(NAME) in s with m[NAME] as the kubelet expands command
// and args: "$$" is a literal "$", a reference to a name m does not hold
// stays as written, and a "$" not followed by "(" or "$" is kept.
func expand(s string, m map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := m[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
			b.WriteByte(next)
			i++
		}
	}
	return b.String()
}

// EnvList is a container's env as NAME=value, each value expanded as the
// kubelet expands dependent variables: $(NAME) is the value of a variable
// defined earlier in the list ("$$" is a literal "$"; a reference to a
// later or unknown variable stays as written).
func EnvList(env []corev1.EnvVar) []string {
	out := make([]string, 0, len(env))
	defined := make(map[string]string, len(env))
	for _, e := range env {
		v := expand(e.Value, defined)
		defined[e.Name] = v
		out = append(out, e.Name+"="+v)
	}
	return out
}
