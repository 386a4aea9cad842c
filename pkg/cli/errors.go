package cli

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// explain words err for users (see Human) and adds "did you mean" to an
// unknown resource type, from the names the server serves.
func (s *session) explain(err error) error {
	if err == nil {
		return nil
	}
	errs := []error{err}
	if agg, ok := err.(utilerrors.Aggregate); ok {
		errs = utilerrors.Flatten(agg).Errors()
	}
	out := make([]error, 0, len(errs))
	var seen []string
	for _, e := range errs {
		e = Human(e)
		if name, ok := unknownResourceType(e); ok {
			if hint := suggest(name, s.resourceNames()); hint != "" {
				e = &humanError{msg: fmt.Sprintf("%s; did you mean %q?", e, hint), err: e}
			}
		}
		if !slices.Contains(seen, e.Error()) {
			seen = append(seen, e.Error())
			out = append(out, e)
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}

// unknownResourceType reads the name out of mappingFor's error for a
// resource type that discovery does not know.
func unknownResourceType(err error) (string, bool) {
	const prefix = "the server doesn't have a resource type "
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return "", false
	}
	name, err := strconv.Unquote(msg[len(prefix):])
	return name, err == nil
}

// resourceNames are the names users may type for the server's resources
// that can be read: plural, singular and short names (none when discovery
// fails). Create-only resources (the access reviews) are not offered.
func (s *session) resourceNames() []string {
	d, err := s.conn.ToDiscoveryClient()
	if err != nil {
		return nil
	}
	lists, _ := d.ServerPreferredResources()
	var names []string
	for _, l := range lists {
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || (len(r.Verbs) > 0 && !slices.Contains(r.Verbs, "get")) {
				continue
			}
			names = append(names, r.Name, r.SingularName)
			names = append(names, r.ShortNames...)
		}
	}
	return names
}

// kindHint says what the server serves instead of gvk: the same kind in
// another version, or a kind of the group with a close name ("" if none).
func (s *session) kindHint(gvk schema.GroupVersionKind) string {
	d, err := s.conn.ToDiscoveryClient()
	if err != nil {
		return ""
	}
	_, lists, _ := d.ServerGroupsAndResources()
	var kinds []string
	byLower := map[string]string{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil || gv.Group != gvk.Group {
			continue
		}
		for _, r := range l.APIResources {
			if r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") {
				return fmt.Sprintf(" (the server serves it in %s)", gv)
			}
			kinds = append(kinds, strings.ToLower(r.Kind))
			byLower[strings.ToLower(r.Kind)] = r.Kind
		}
	}
	if k := suggest(gvk.Kind, kinds); k != "" {
		return fmt.Sprintf("; did you mean %q?", byLower[k])
	}
	return ""
}

// humanError carries the message a user reads and the error it explains
// (so apierrors.IsNotFound and errors.Is still see through it).
type humanError struct {
	msg string
	err error
}

func (e *humanError) Error() string { return e.msg }
func (e *humanError) Unwrap() error { return e.err }

// Human rewrites an error from the server or the network into what a user
// reads: a server's Status message as-is (for Invalid, the causes on lines
// of their own: field and message), a network failure as the server that
// could not be reached and why. Other errors are returned unchanged.
func Human(err error) error {
	if err == nil {
		return nil
	}
	var he *humanError
	if errors.As(err, &he) {
		return err
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return &humanError{msg: statusMessage(se.Status()), err: err}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		host := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
			host = u.Scheme + "://" + u.Host
		}
		return &humanError{msg: fmt.Sprintf("cannot reach the server at %s: %v", host, ue.Err), err: err}
	}
	return err
}

// statusMessage renders a failure Status.
func statusMessage(st metav1.Status) string {
	msg := st.Message
	if msg == "" {
		msg = string(st.Reason)
		if msg == "" {
			msg = fmt.Sprintf("the server failed the request with status %d", st.Code)
		}
	}
	if st.Reason == metav1.StatusReasonUnauthorized {
		return msg + " (is the token in the kubeconfig the server's?)"
	}
	// Causes name fields for invalid objects; others (client-go's
	// "UnexpectedServerResponse") only repeat the body.
	var causes []metav1.StatusCause
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			if c.Field != "" || (st.Reason == metav1.StatusReasonInvalid && c.Message != "") {
				causes = append(causes, c)
			}
		}
	}
	if len(causes) == 0 {
		return msg
	}
	// "X "n" is invalid: [a: b, c: d]" repeats the causes on one line;
	// keep the head and list them one per line.
	if i := strings.Index(msg, " is invalid: "); i >= 0 {
		msg = msg[:i+len(" is invalid")]
	}
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(msg, ":"))
	b.WriteString(":")
	for _, c := range causes {
		b.WriteString("\n  ")
		if c.Field != "" {
			b.WriteString(c.Field)
			b.WriteString(": ")
		}
		b.WriteString(c.Message)
	}
	return b.String()
}

// suggest picks the known name closest to s: the smallest edit distance
// if it is at most 2 (and less than s is long), else a name s is a prefix
// of or that is a prefix of s (at least two letters shared); ties go to
// the shorter, then the alphabetically first name. "" when nothing is
// close.
func suggest(s string, known []string) string {
	if len(s) > maxSuggestLen {
		return ""
	}
	// Names are lower case: "KSVC" means "ksvc".
	if lower := strings.ToLower(s); lower != s && slices.Contains(known, lower) {
		return lower
	}
	s = strings.ToLower(s)
	best, bestDist := "", 3
	for _, k := range known {
		if k == "" || k == s {
			continue
		}
		d := editDistance(s, k)
		if d >= len(s) {
			continue // "x" is 2 edits from every 2-letter name
		}
		if d < bestDist || (d == bestDist && best != "" && better(k, best)) {
			best, bestDist = k, d
		}
	}
	if best != "" {
		return best
	}
	if len(s) < 2 {
		return ""
	}
	for _, k := range known {
		if len(k) < 2 || k == s || !(strings.HasPrefix(k, s) || strings.HasPrefix(s, k)) {
			continue
		}
		if best == "" || better(k, best) {
			best = k
		}
	}
	return best
}

// maxSuggestLen bounds the names suggest compares (no kind is that long),
// so a huge argument costs no quadratic time.
const maxSuggestLen = 253

func better(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// editDistance is the Levenshtein distance of a and b in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
