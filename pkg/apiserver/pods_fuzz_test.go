package apiserver

import (
	"net/url"
	"strconv"
	"strings"
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

// FuzzExecOptions: any pods/exec query is parsed or refused with a 400,
// and what is accepted has a bounded command and a stream.
func FuzzExecOptions(f *testing.F) {
	for _, s := range []string{
		"command=ls&stdout=true", "command=sh&command=-c&command=echo+hi&stdin=true&stdout=true&stderr=true&container=user-container",
		"command=ls", "stdout=true", "command=ls&stdout=1&tty=true", "command=ls&stdout=maybe", "command=a%00b&stdout=true",
		"command=ls&stdout=true&stdout=false",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		o, err := parseExecOptions(q)
		if err != nil {
			if !apierrors.IsBadRequest(err) {
				t.Fatalf("%q: %v, want a 400", raw, err)
			}
			return
		}
		if len(o.Command) == 0 || len(o.Command) > maxExecArgs || o.TTY || !(o.Stdin || o.Stdout || o.Stderr) {
			t.Fatalf("%q: accepted %+v", raw, o)
		}
	})
}

// FuzzForwardPorts: any pods/portforward ports query is accepted only
// with at most maxForwardPorts ports from 1 to 65535.
func FuzzForwardPorts(f *testing.F) {
	for _, s := range []string{"ports=8080", "ports=8080,9090", "ports=0", "ports=65536", "ports=-1", "ports=", "ports=80&ports=81", "ports=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		if err := parseForwardPorts(q); err != nil {
			if !apierrors.IsBadRequest(err) {
				t.Fatalf("%q: %v, want a 400", raw, err)
			}
			return
		}
		n := 0
		for _, v := range q["ports"] {
			for _, p := range strings.Split(v, ",") {
				n++
				if x, err := strconv.Atoi(p); err != nil || x < 1 || x > 65535 {
					t.Fatalf("%q: port %q accepted", raw, p)
				}
			}
		}
		if n > maxForwardPorts {
			t.Fatalf("%q: %d ports accepted", raw, n)
		}
	})
}
