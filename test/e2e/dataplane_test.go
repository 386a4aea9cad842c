package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// dataPlaneConfig makes scale to zero quick: Knative's smallest stable
// window (6s) and a short grace period, so a revision with no traffic is at
// zero some 8s after its last request. allow-zero-initial-scale lets a
// Revision ask for initial-scale 0.
const dataPlaneConfig = `configMaps:
  config-autoscaler:
    stable-window: 6s
    scale-to-zero-grace-period: 2s
    allow-zero-initial-scale: "true"
`

// dpEnv is one knbox serve (runc, the default RuntimeClass) with a registry
// holding the runtime-info image, shared by the subtests of
// TestDataPlane, which run one after the other.
type dpEnv struct {
	t      *testing.T
	k      *kubectlEnv
	reg    string
	client *http.Client
}

// TestDataPlane shows issue 5 end to end with real containers: scale from
// zero, containerConcurrency, timeouts, traffic splits and tags, scale up
// under load and back to zero, and a rollout without errors.
func TestDataPlane(t *testing.T) {
	requireTool(t, "runc")
	cfg := filepath.Join(t.TempDir(), "knbox.yaml")
	if err := os.WriteFile(cfg, []byte(dataPlaneConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	k := newKubectl(t, "--config", cfg)
	reg := imagetest.StartRegistry(t)
	imagetest.PushGoImage(t, reg, "runtime-info:v1", "github.com/knbox/knbox/test/images/runtime-info", image.Config{})
	// A second tag of the same program whose config differs, so that its
	// digest does too: the rollout changes the Service's image to it.
	imagetest.PushGoImage(t, reg, "runtime-info:v2", "github.com/knbox/knbox/test/images/runtime-info", image.Config{Env: []string{"IMAGE_VERSION=v2"}})
	e := &dpEnv{t: t, k: k, reg: reg, client: routerClient(k.srv.httpAddr, 64)}

	t.Run("ColdRequestAtZero", e.testColdRequestAtZero)
	t.Run("ContainerConcurrencyOne", e.testContainerConcurrencyOne)
	t.Run("TimeoutsBeforeFirstByteOnly", e.testTimeouts)
	t.Run("SplitAndTags", e.testSplitAndTags)
	t.Run("ScaleUpUnderLoadThenToZero", e.testScaleUpThenZero)
	t.Run("RolloutWithoutErrors", e.testRollout)
	t.Run("InitialScaleZero", e.testInitialScaleZero)
}

// routerClient sends every request to the router at addr, whatever the URL's
// host (names under localhost need not resolve on every machine).
func routerClient(addr string, conns int) *http.Client {
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: conns,
	}}
}

// info is the part of runtime-info's GET / answer that these tests read.
type info struct {
	Env         map[string]string `json:"env"`
	Hostname    string            `json:"hostname"`
	Started     time.Time         `json:"started"`
	MaxInFlight int64             `json:"maxInFlight"`
}

// serviceSpec is a Service running runtime-info: its template's
// annotations, spec lines (containerConcurrency, timeoutSeconds, ...) and
// container env, and its traffic block.
type serviceSpec struct {
	name        string
	tag         string // image tag, v1 by default
	annotations map[string]string
	spec        []string // lines under template.spec, e.g. "containerConcurrency: 1"
	env         map[string]string
	traffic     string // YAML under spec.traffic, indented by two spaces, or ""
}

// yaml is the Service's manifest.
func (e *dpEnv) yaml(s serviceSpec) string {
	tag := s.tag
	if tag == "" {
		tag = "v1"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: %s\nspec:\n  template:\n", s.name)
	if len(s.annotations) > 0 {
		b.WriteString("    metadata:\n      annotations:\n")
		keys := make([]string, 0, len(s.annotations))
		for k := range s.annotations {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "        %s: %q\n", k, s.annotations[k])
		}
	}
	b.WriteString("    spec:\n")
	for _, l := range s.spec {
		fmt.Fprintf(&b, "      %s\n", l)
	}
	fmt.Fprintf(&b, "      containers:\n      - image: %s/runtime-info:%s\n", e.reg, tag)
	if len(s.env) > 0 {
		b.WriteString("        env:\n")
		keys := make([]string, 0, len(s.env))
		for k := range s.env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "        - name: %s\n          value: %q\n", k, s.env[k])
		}
	}
	if s.traffic != "" {
		b.WriteString("  traffic:\n" + s.traffic)
	}
	return b.String()
}

// apply applies s and waits until the Service has observed it and is Ready;
// it returns the Service's URL.
func (e *dpEnv) apply(t *testing.T, s serviceSpec) string {
	t.Helper()
	e.k.must(e.yaml(s), "apply", "-f", "-")
	var last string
	e.waitFor(t, 120*time.Second, "service "+s.name+" ready", func() (bool, string) {
		out, err := e.k.run("", "get", "ksvc", s.name, "-o",
			`jsonpath={.metadata.generation} {.status.observedGeneration} {.status.conditions[?(@.type=="Ready")].status} {.status.url}`)
		last = out
		f := strings.Fields(out)
		return err == nil && len(f) == 4 && f[0] == f[1] && f[2] == "True", out
	})
	return strings.Fields(last)[3]
}

// waitFor polls cond every 250ms until it holds; after d it fails the test
// with cond's last description. The deadline only keeps a broken run from
// hanging: nothing is asserted about how long it took.
func (e *dpEnv) waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, desc := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			revs, _ := e.k.run("", "get", "rev", "-o", "wide")
			t.Fatalf("%s: not so after %v; last: %s\nrevisions:\n%s", what, d, desc, revs)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// revState is what a Revision's status says about its scale.
type revState struct {
	actual       int
	activeStatus string
	activeReason string
}

func (e *dpEnv) revState(t *testing.T, rev string) (revState, string) {
	t.Helper()
	out, err := e.k.run("", "get", "rev", rev, "-o",
		`jsonpath={.status.actualReplicas}|{.status.conditions[?(@.type=="Active")].status}|{.status.conditions[?(@.type=="Active")].reason}`)
	if err != nil {
		return revState{actual: -1}, out
	}
	f := strings.Split(strings.TrimSpace(out), "|")
	if len(f) != 3 {
		return revState{actual: -1}, out
	}
	var st revState
	st.actual = -1
	if f[0] != "" {
		st.actual, _ = strconv.Atoi(f[0])
	}
	st.activeStatus, st.activeReason = f[1], f[2]
	return st, out
}

// waitZero waits until rev has no instance and its Active condition is
// False with reason NoTraffic.
func (e *dpEnv) waitZero(t *testing.T, rev string) {
	t.Helper()
	e.waitFor(t, 90*time.Second, rev+" scaled to zero (actualReplicas 0, Active False NoTraffic)", func() (bool, string) {
		st, out := e.revState(t, rev)
		return st.actual == 0 && st.activeStatus == "False" && st.activeReason == "NoTraffic", out
	})
}

// get sends GET url+path through the router and returns the status and body.
func (e *dpEnv) get(url, path string) (int, []byte, error) {
	resp, err := e.client.Get(url + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// getInfo sends GET url/ and decodes runtime-info's answer; anything but a
// 200 with JSON is an error.
func (e *dpEnv) getInfo(url string) (info, error) {
	code, body, err := e.get(url, "/")
	if err != nil {
		return info{}, err
	}
	if code != 200 {
		return info{}, fmt.Errorf("status %d: %.200s", code, body)
	}
	var in info
	if err := json.Unmarshal(body, &in); err != nil {
		return info{}, fmt.Errorf("runtime-info answer: %v: %.200s", err, body)
	}
	return in, nil
}

// withHost returns url with its host name replaced by host (the port kept).
func withHost(url, host string) string {
	rest := strings.TrimPrefix(url, "http://")
	if i := strings.IndexByte(rest, ':'); i >= 0 {
		return "http://" + host + rest[i:]
	}
	return "http://" + host
}

// testColdRequestAtZero: a revision left without traffic scales to zero
// (Active False, NoTraffic); one request then reaches a new instance and
// is answered 200, and the revision is Active again.
func (e *dpEnv) testColdRequestAtZero(t *testing.T) {
	url := e.apply(t, serviceSpec{name: "cold"})
	warm, err := e.getInfo(url)
	if err != nil {
		t.Fatalf("warm request: %v", err)
	}
	e.waitZero(t, "cold-00001")
	atZero := time.Now()

	in, err := e.getInfo(url)
	if err != nil {
		t.Fatalf("request at zero scale: %v", err)
	}
	if in.Env["K_REVISION"] != "cold-00001" {
		t.Errorf("K_REVISION %q", in.Env["K_REVISION"])
	}
	if in.Hostname == warm.Hostname {
		t.Errorf("request at zero was answered by the instance that served before scale to zero (%s)", in.Hostname)
	}
	t.Logf("cold instance %s started %v after zero was observed", in.Hostname, in.Started.Sub(atZero).Round(time.Millisecond))

	e.waitFor(t, 60*time.Second, "cold-00001 Active True after the request", func() (bool, string) {
		st, out := e.revState(t, "cold-00001")
		return st.activeStatus == "True", out
	})
}

// testContainerConcurrencyOne: with containerConcurrency 1, five parallel
// clients never put more than one request at a time on an instance.
// Every client alternates /sleep (load) with GET /, whose maxInFlight is the
// most requests its instance has ever had in flight; the autoscaler may add
// instances meanwhile, each is checked by the GET / requests it serves.
func (e *dpEnv) testContainerConcurrencyOne(t *testing.T) {
	url := e.apply(t, serviceSpec{name: "cc1", spec: []string{"containerConcurrency: 1"}})
	const clients, rounds = 5, 4
	type result struct {
		path string
		code int
		err  error
		info info
	}
	results := make(chan result, clients*rounds*2)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				code, _, err := e.get(url, "/sleep?ms=300")
				results <- result{path: "/sleep", code: code, err: err}
				in, err := e.getInfo(url)
				results <- result{path: "/", code: 200, err: err, info: in}
			}
		}()
	}
	wg.Wait()
	close(results)
	hosts := map[string]int64{}
	n := 0
	for r := range results {
		n++
		if r.err != nil {
			t.Errorf("GET %s: %v", r.path, r.err)
			continue
		}
		if r.code != 200 {
			t.Errorf("GET %s: status %d", r.path, r.code)
			continue
		}
		if r.path == "/" {
			if r.info.MaxInFlight > hosts[r.info.Hostname] {
				hosts[r.info.Hostname] = r.info.MaxInFlight
			}
			if r.info.MaxInFlight > 1 {
				t.Errorf("instance %s saw %d requests in flight with containerConcurrency 1", r.info.Hostname, r.info.MaxInFlight)
			}
		}
	}
	if n != clients*rounds*2 {
		t.Errorf("%d results, want %d", n, clients*rounds*2)
	}
	t.Logf("max in flight per instance: %v", hosts)
}

// testTimeouts: timeoutSeconds (and responseStartTimeoutSeconds) give 504
// when no byte of the response came in time, and do not cut a response
// that has started.
func (e *dpEnv) testTimeouts(t *testing.T) {
	for _, c := range []struct {
		name string
		spec []string
	}{
		{"timeout", []string{"timeoutSeconds: 1"}},
		{"startto", []string{"timeoutSeconds: 30", "responseStartTimeoutSeconds: 1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := e.apply(t, serviceSpec{name: c.name, spec: c.spec})
			code, body, err := e.get(url, "/sleep?ms=3000")
			if err != nil {
				t.Errorf("GET /sleep?ms=3000: %v", err)
			} else if code != http.StatusGatewayTimeout {
				t.Errorf("GET /sleep?ms=3000 with %v: status %d, want 504: %.200s", c.spec, code, body)
			}
			code, body, err = e.get(url, "/stream?n=30")
			if err != nil {
				t.Errorf("GET /stream?n=30 (3s, first byte at once) with %v: %v after %d bytes: %.200q", c.spec, err, len(body), body)
			} else if code != 200 || strings.Count(string(body), "chunk ") != 30 || !strings.Contains(string(body), "chunk 29\n") {
				t.Errorf("GET /stream?n=30 with %v: status %d, %d chunks, want 200 and 30: %.200q", c.spec, code, strings.Count(string(body), "chunk "), body)
			}
		})
	}
}

// testSplitAndTags: two revisions at 50% each share 200 requests, each at
// least 25% of them; each tag host serves only its revision.
func (e *dpEnv) testSplitAndTags(t *testing.T) {
	e.apply(t, serviceSpec{name: "split", env: map[string]string{"TARGET": "one"}})
	url := e.apply(t, serviceSpec{name: "split", env: map[string]string{"TARGET": "two"}, traffic: `  - revisionName: split-00001
    percent: 50
    tag: one
  - revisionName: split-00002
    percent: 50
    tag: two
`})
	traffic := e.k.must("", "get", "ksvc", "split", "-o", `jsonpath={range .status.traffic[*]}{.revisionName}={.percent}={.tag}={.url} {end}`)
	t.Logf("status.traffic: %s", traffic)
	const n, clients = 200, 4
	var mu sync.Mutex
	counts := map[string]int{}
	var errs []string
	var next atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= n {
				in, err := e.getInfo(url)
				mu.Lock()
				if err != nil {
					errs = append(errs, err.Error())
				} else {
					counts[in.Env["K_REVISION"]]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("200 requests to %s: %v", url, counts)
	if len(errs) > 0 {
		t.Errorf("%d of %d requests failed, first: %s", len(errs), n, errs[0])
	}
	for _, rev := range []string{"split-00001", "split-00002"} {
		if counts[rev] < n/4 {
			t.Errorf("%s served %d of %d requests, want at least %d", rev, counts[rev], n, n/4)
		}
	}
	for tag, rev := range map[string]string{"one": "split-00001", "two": "split-00002"} {
		tagURL := withHost(url, tag+"-split.default.localhost")
		if !strings.Contains(traffic, rev+"=50="+tag+"="+tagURL) {
			t.Errorf("status.traffic lacks %s=50=%s=%s: %s", rev, tag, tagURL, traffic)
		}
		own := map[string]int{}
		for i := 0; i < 20; i++ {
			in, err := e.getInfo(tagURL)
			if err != nil {
				t.Errorf("tag %s: %v", tag, err)
				continue
			}
			own[in.Env["K_REVISION"]]++
		}
		if own[rev] != 20 {
			t.Errorf("tag host %s: revisions %v, want all 20 from %s", tagURL, own, rev)
		}
	}
}

// testScaleUpThenZero: with a target of one request in flight per instance,
// parallel slow requests make the autoscaler add instances (distinct
// hostnames answer, status.actualReplicas goes above 1); once the load
// stops the revision goes back to zero.
func (e *dpEnv) testScaleUpThenZero(t *testing.T) {
	const rev = "scale-00001"
	url := e.apply(t, serviceSpec{name: "scale", annotations: map[string]string{
		"autoscaling.knative.dev/target":    "1",
		"autoscaling.knative.dev/max-scale": "4",
	}})
	const clients = 6
	const maxRequests = 600 // in all, with a time bound below
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var sent atomic.Int64
	var mu sync.Mutex
	hosts := map[string]int{}
	var failures []string
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				if sent.Add(1) > maxRequests {
					return
				}
				if i%2 == 0 {
					code, body, err := e.get(url, "/sleep?ms=1000")
					if err != nil || code != 200 {
						mu.Lock()
						failures = append(failures, fmt.Sprintf("/sleep: %d %v %.100s", code, err, body))
						mu.Unlock()
					}
					continue
				}
				in, err := e.getInfo(url)
				mu.Lock()
				if err != nil {
					failures = append(failures, "/: "+err.Error())
				} else {
					hosts[in.Hostname]++
				}
				mu.Unlock()
			}
		}()
	}
	// Watch the Revision's status while the load runs.
	maxActual := 0
	for {
		st, _ := e.revState(t, rev)
		if st.actual > maxActual {
			maxActual = st.actual
		}
		mu.Lock()
		distinct := len(hosts)
		mu.Unlock()
		if maxActual > 1 && distinct > 1 {
			break
		}
		if ctx.Err() != nil || sent.Load() > maxRequests {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	halt()
	wg.Wait()
	t.Logf("%d requests; max status.actualReplicas %d; GET / answered by %v", min(sent.Load(), maxRequests), maxActual, hosts)
	if len(failures) > 0 {
		t.Errorf("%d requests failed under load, first: %s", len(failures), failures[0])
	}
	if maxActual <= 1 {
		t.Errorf("status.actualReplicas never went above 1 under load (max %d)", maxActual)
	}
	if len(hosts) <= 1 {
		t.Errorf("GET / under load answered by %d instance(s), want more than one: %v", len(hosts), hosts)
	}
	e.waitZero(t, rev)
}

// testRollout: a bounded load (4 clients, at most 40s and 20000 requests)
// runs while the Service's image changes (the new Revision takes the
// traffic once ready, the old one drains and goes to zero) and then its
// traffic split does (the old Revision, now at zero, takes half again);
// every response must be 2xx.
func (e *dpEnv) testRollout(t *testing.T) {
	url := e.apply(t, serviceSpec{name: "roll"})
	const clients, maxRequests = 4, 20000
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	type sample struct {
		seq  int64
		rev  string
		img  string
		code int
		err  string
	}
	var seq atomic.Int64
	var mu sync.Mutex
	var samples []sample
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				s := sample{seq: seq.Add(1)}
				if s.seq > maxRequests {
					return
				}
				resp, err := e.client.Get(url + "/")
				if err != nil {
					if ctx.Err() != nil {
						return // the load's own deadline, not a failure
					}
					s.err = err.Error()
				} else {
					body, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					s.code = resp.StatusCode
					var in info
					if rerr != nil {
						s.err = "reading body: " + rerr.Error()
					} else if json.Unmarshal(body, &in) == nil {
						s.rev, s.img = in.Env["K_REVISION"], in.Env["IMAGE_VERSION"]
					} else if s.code/100 == 2 {
						s.err = fmt.Sprintf("not runtime-info JSON: %.100s", body)
					}
				}
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
		}()
	}
	// seen waits until a response from rev arrives with a sequence number
	// after from, or the load ends.
	seen := func(rev string, from int64) bool {
		for ctx.Err() == nil {
			mu.Lock()
			for _, s := range samples {
				if s.seq > from && s.rev == rev {
					mu.Unlock()
					return true
				}
			}
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
		return false
	}
	// gone waits until rev, no longer routed, has no instance, or the load
	// ends.
	gone := func(rev string) bool {
		for ctx.Err() == nil {
			if st, _ := e.revState(t, rev); st.actual == 0 {
				return true
			}
			time.Sleep(250 * time.Millisecond)
		}
		return false
	}
	steps := []string{}
	if seen("roll-00001", 0) {
		steps = append(steps, "v1 serving")
		// The image changes: a new Revision, and all traffic to it once ready.
		e.k.must(e.yaml(serviceSpec{name: "roll", tag: "v2"}), "apply", "-f", "-")
		if seen("roll-00002", seq.Load()) && gone("roll-00001") {
			steps = append(steps, "image change served by roll-00002, roll-00001 drained to zero")
			// The traffic split changes: half back to the first revision.
			e.k.must(e.yaml(serviceSpec{name: "roll", tag: "v2", traffic: `  - revisionName: roll-00001
    percent: 50
  - revisionName: roll-00002
    percent: 50
`}), "apply", "-f", "-")
			mark := seq.Load()
			if seen("roll-00001", mark) && seen("roll-00002", mark) {
				steps = append(steps, "split served by both")
				// Keep the load a little longer on the new split.
				more := seq.Load() + 100
				for ctx.Err() == nil && seq.Load() < more {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
	}
	cancel()
	wg.Wait()

	byRev := map[string]int{}
	bad := map[string]int{}
	var non2xx []sample
	for _, s := range samples {
		if s.err != "" || s.code/100 != 2 {
			non2xx = append(non2xx, s)
			bad[fmt.Sprintf("%d %s", s.code, s.err)]++
			continue
		}
		byRev[s.rev+" image="+s.img]++
	}
	t.Logf("rollout: %d responses, steps %v; 2xx by revision: %v", len(samples), steps, byRev)
	if len(steps) != 3 {
		t.Errorf("rollout did not complete within the load's bound: reached %v", steps)
	}
	if len(non2xx) > 0 {
		t.Errorf("%d of %d responses were not 2xx (status and error: count): %v; first at request #%d", len(non2xx), len(samples), bad, non2xx[0].seq)
	}
	if byRev["roll-00002 image=v2"] == 0 {
		t.Errorf("no response from roll-00002 running image v2: %v", byRev)
	}
}

// testInitialScaleZero: a Revision with autoscaling.knative.dev/initial-scale
// "0" (allowed by allow-zero-initial-scale) runs its deployment probe, is
// Ready, and then has no instance until a request comes, which is answered.
// Without the annotation the revision would keep an instance for a stable
// window plus the grace period (8s here); the wait below allows far more
// than that, only so that a broken run ends.
func (e *dpEnv) testInitialScaleZero(t *testing.T) {
	url := e.apply(t, serviceSpec{name: "zeroinit", annotations: map[string]string{"autoscaling.knative.dev/initial-scale": "0"}})
	e.waitZero(t, "zeroinit-00001")
	in, err := e.getInfo(url)
	if err != nil {
		t.Fatalf("request at zero scale: %v", err)
	}
	if in.Env["K_REVISION"] != "zeroinit-00001" {
		t.Errorf("K_REVISION %q", in.Env["K_REVISION"])
	}
}
