package console

import (
	"crypto/tls"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
)

func httptestTLS(*fixture) *tls.Config { return &tls.Config{InsecureSkipVerify: true} }

func TestQuantile(t *testing.T) {
	t.Parallel()
	b := []float64{10, 20, 40}
	for _, tt := range []struct {
		q    float64
		cum  []uint64
		want float64
	}{
		{0.5, []uint64{0, 0, 0, 0}, math.NaN()},
		{0.5, []uint64{10, 10, 10, 10}, 5},
		{0.5, []uint64{0, 10, 10, 10}, 15},
		{0.95, []uint64{0, 0, 10, 10}, 39},
		{0.99, []uint64{0, 0, 0, 10}, 40},
		{0.5, []uint64{1, 2}, math.NaN()},
	} {
		got := quantile(tt.q, b, tt.cum)
		if math.IsNaN(tt.want) != math.IsNaN(got) || !math.IsNaN(got) && math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("quantile(%v, %v) = %v, want %v", tt.q, tt.cum, got, tt.want)
		}
	}
}

// TestSamplerBounded: each revision keeps at most Samples points, and a
// revision that leaves the metrics leaves the sampler.
func TestSamplerBounded(t *testing.T) {
	t.Parallel()
	var ts []Totals
	s := newSampler(func() ([]Totals, error) { return ts, nil }, []float64{10}, time.Second, 5)
	now := time.Unix(1000, 0)
	for i := range 20 {
		ts = []Totals{{Namespace: "ns", Revision: "r", Requests: float64(i * 10), Latency: []uint64{uint64(i), uint64(i)}, Instances: 1}}
		s.sample(now.Add(time.Duration(i) * time.Second))
	}
	pts := s.series("ns", "r")
	if len(pts) != 5 {
		t.Fatalf("%d points kept, want 5", len(pts))
	}
	if pts[4].Rate != 10 || pts[4].P50 != 5 {
		t.Errorf("last point %+v, want rate 10 and p50 5", pts[4])
	}
	ts = nil
	s.sample(now.Add(time.Minute))
	if s.series("ns", "r") != nil {
		t.Error("a revision gone from the metrics is still sampled")
	}
	g := graph("rate", "Requests", "req/s", pts, func(p Point) float64 { return p.Rate })
	if g.Count != 5 || g.Max != 10 || strings.Count(g.Points, ",") != 5 {
		t.Errorf("graph %+v", g)
	}
}

// FuzzParseRoute: any path either parses to a page with valid names or is
// refused; it never panics.
func FuzzParseRoute(f *testing.F) {
	for _, s := range []string{"/console/", "/console", "/console/login", "/console/static/app.js", "/console/static/../x",
		"/console/namespaces/default/services/hello", "/console/namespaces/default/revisions/hello-00001/log",
		"/console/namespaces//services/", "/console/namespaces/a/services/b/c/d", "/consolex"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rt, err := parseRoute(p)
		if err != nil {
			return
		}
		if rt.page == pageService || rt.page == pageLog {
			if rt.namespace == "" || rt.name == "" || strings.ContainsAny(rt.namespace+rt.name, "/.") && strings.Contains(rt.namespace, ".") {
				t.Fatalf("%q parsed to %+v", p, rt)
			}
		}
	})
}

// FuzzSignIn: a typed-in token is accepted only when it is printable ASCII
// without spaces and bounded; any Origin header is judged without panic.
func FuzzSignIn(f *testing.F) {
	for _, s := range []string{"", "abc", "has space", "tab\there", "ünïcode", strings.Repeat("x", maxTokenBytes+1), "null", "https://a:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if checkToken(v) == "" {
			if len(v) == 0 || len(v) > maxTokenBytes || strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r > '~' }) {
				t.Fatalf("token %q accepted", v)
			}
		}
		r, _ := http.NewRequest(http.MethodPost, "https://a:1/console/login", nil)
		r.Header.Set("Origin", v)
		if sameOrigin(r) && v != "" && v != "https://a:1" && v != "http://a:1" {
			if u, err := url.Parse(v); err != nil || u.Host != "a:1" {
				t.Fatalf("origin %q taken as the console's", v)
			}
		}
	})
}

// TestSamplerIdleRevisionsAreSmall: what the graphs keep of 500 idle
// revisions with a full window each stays small (16 bytes a point;
// 56 with its time, before: 4 MiB in all).
func TestSamplerIdleRevisionsAreSmall(t *testing.T) {
	const revisions, samples = 500, 120
	ts := make([]Totals, revisions)
	for i := range ts {
		ts[i] = Totals{Namespace: "default", Revision: fmt.Sprintf("idle-%03d-00001", i), Latency: make([]uint64, 11)}
	}
	s := newSampler(func() ([]Totals, error) { return ts, nil }, []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}, time.Second, samples)
	before := heapAlloc()
	now := time.Unix(1000, 0)
	for i := range samples + 10 {
		s.sample(now.Add(time.Duration(i) * time.Second))
	}
	grown := heapAlloc() - before
	if limit := int64(2 << 20); grown > limit {
		t.Errorf("%d idle revisions' graphs hold %d KiB, want at most %d", revisions, grown>>10, limit>>10)
	}
	t.Logf("%d revisions, %d samples: %d KiB", revisions, samples, grown>>10)
	runtime.KeepAlive(s)
}

func heapAlloc() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
