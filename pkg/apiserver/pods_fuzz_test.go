package apiserver

import (
	"net/url"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// FuzzPodLogOptions: any pods/log query is parsed or refused with a 400,
// and what is accepted is within kube-apiserver's bounds.
func FuzzPodLogOptions(f *testing.F) {
	for _, s := range []string{
		"", "container=user-container&follow=true&tailLines=10&timestamps=true",
		"sinceSeconds=60", "sinceSeconds=9223372036854775807", "sinceTime=2026-01-01T00:00:00Z",
		"sinceSeconds=1&sinceTime=2026-01-01T00:00:00Z", "tailLines=-1", "limitBytes=0", "previous=1",
		"follow=yes", "follow=true&follow=false", "container=%00", "tailLines=1e9",
	} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		o, err := parsePodLogOptions(q, now)
		if err != nil {
			if !apierrors.IsBadRequest(err) {
				t.Fatalf("%q: %v, want a 400", raw, err)
			}
			return
		}
		if o.TailLines != nil && *o.TailLines < 0 || o.LimitBytes != nil && *o.LimitBytes < 1 {
			t.Fatalf("%q: accepted %+v", raw, o)
		}
	})
}
