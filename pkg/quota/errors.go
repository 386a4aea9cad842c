package quota

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ErrExceeded is what every quota refusal wraps: errors.Is(err,
// ErrExceeded) tells a quota refusal from a failure to read the quotas.
var ErrExceeded = errors.New("exceeded quota")

// ExceededError says which hard limits of one ResourceQuota a request would
// cross. Its text is Kubernetes': "exceeded quota: compute, requested:
// limits.cpu=2, used: limits.cpu=1, limited: limits.cpu=2".
type ExceededError struct {
	// Quota is the ResourceQuota's name.
	Quota string
	// Requested, Used and Hard hold the crossed resources only.
	Requested, Used, Hard corev1.ResourceList
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("exceeded quota: %s, requested: %s, used: %s, limited: %s",
		e.Quota, pretty(e.Requested), pretty(e.Used), pretty(e.Hard))
}

// Unwrap makes errors.Is(err, ErrExceeded) true.
func (e *ExceededError) Unwrap() error { return ErrExceeded }

// UnsetError is the refusal of a pod whose containers do not state a
// request or limit that a ResourceQuota limits: "failed quota: compute: must
// specify limits.cpu for: user-container".
type UnsetError struct {
	Quota string
	// Missing maps each quota name to the containers that do not state it.
	Missing map[corev1.ResourceName][]string
}

func (e *UnsetError) Error() string {
	names := make([]string, 0, len(e.Missing))
	for n := range e.Missing {
		names = append(names, string(n))
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		cs := append([]string(nil), e.Missing[corev1.ResourceName(n)]...)
		sort.Strings(cs)
		parts = append(parts, fmt.Sprintf("%s for: %s", n, strings.Join(dedup(cs), ",")))
	}
	return fmt.Sprintf("failed quota: %s: must specify %s", e.Quota, strings.Join(parts, "; "))
}

// Unwrap makes errors.Is(err, ErrExceeded) true.
func (e *UnsetError) Unwrap() error { return ErrExceeded }

func dedup(sorted []string) []string {
	out := sorted[:0]
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// pretty prints name=value pairs sorted by name, as Kubernetes does.
func pretty(l corev1.ResourceList) string {
	parts := make([]string, 0, len(l))
	for _, n := range sortedNames(l) {
		q := l[n]
		parts = append(parts, fmt.Sprintf("%s=%s", n, q.String()))
	}
	return strings.Join(parts, ",")
}
