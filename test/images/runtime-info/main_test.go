package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func newServer(t *testing.T) (*server, string) {
	t.Helper()
	s := &server{started: time.Now(), stdinEOF: true, stdinDetail: "EOF"}
	srv := httptest.NewServer(s.handler())
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func eventually(t *testing.T, cond func() bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestInfo(t *testing.T) {
	t.Setenv("K_REVISION", "hello-00001")
	_, url := newServer(t)
	extra := filepath.Join(t.TempDir(), "extra")
	if err := os.WriteFile(extra, []byte("12345"), 0o640); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", url+"/?path="+extra, nil)
	req.Header.Set("X-Custom", "v")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info Info
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	if info.Env["K_REVISION"] != "hello-00001" || info.Request.Headers["X-Custom"][0] != "v" || info.Request.Proto != "HTTP/1.1" {
		t.Errorf("env %v headers %v proto %s", info.Env["K_REVISION"], info.Request.Headers, info.Request.Proto)
	}
	if len(info.Files) != len(DefaultFiles)+1 {
		t.Fatalf("%d files, want %d", len(info.Files), len(DefaultFiles)+1)
	}
	f := info.Files[len(info.Files)-1]
	if f.Path != extra || !f.Exists || f.Size != 5 || f.Perm != "0640" || f.Type != "file" || !f.Writable {
		t.Errorf("extra file %+v", f)
	}
	if info.Cgroup.Version == 0 && len(info.Mounts) == 0 {
		t.Errorf("neither cgroup nor mounts seen: %+v", info.Cgroup)
	}
}

func TestConcurrency(t *testing.T) {
	_, url := newServer(t)
	concurrency := func() (in, max int64) {
		_, body := get(t, url+"/concurrency")
		var c map[string]int64
		json.Unmarshal([]byte(body), &c)
		return c["inFlight"], c["maxInFlight"]
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", url+"/sleep?ms=60000", nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	eventually(t, func() bool { in, _ := concurrency(); return in == 3 }, 5*time.Second)
	cancel()
	wg.Wait()
	eventually(t, func() bool { in, _ := concurrency(); return in == 0 }, 5*time.Second)
	if _, max := concurrency(); max != 3 {
		t.Errorf("maxInFlight = %d, want 3", max)
	}
}

func TestEndpoints(t *testing.T) {
	_, url := newServer(t)
	if code, body := get(t, url+"/sleep?ms=10"); code != 200 || body != "slept 10ms\n" {
		t.Errorf("/sleep: %d %q", code, body)
	}
	if code, _ := get(t, url+"/sleep?ms=abc"); code != 400 {
		t.Errorf("/sleep?ms=abc: %d, want 400", code)
	}
	if code, body := get(t, url+"/stream?n=3"); code != 200 || strings.Count(body, "chunk") != 3 {
		t.Errorf("/stream: %d %q", code, body)
	}
	if code, body := get(t, url+"/alloc?mb=2"); code != 200 || !strings.Contains(body, `"allocatedMiB": 2`) {
		t.Errorf("/alloc: %d %q", code, body)
	}
	if code, _ := get(t, url+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	get(t, url+"/fail-health")
	if code, _ := get(t, url+"/healthz"); code != 500 {
		t.Errorf("/healthz after /fail-health: %d, want 500", code)
	}
	if code, body := get(t, url+"/log?msg=hello"); code != 200 || !strings.Contains(body, `"stdout": "ok"`) {
		t.Errorf("/log: %d %q", code, body)
	}
	if code, _ := get(t, url+"/nope"); code != 404 {
		t.Errorf("/nope: %d, want 404", code)
	}
}
