package router

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// BenchmarkProxy measures a small GET straight to an instance and through
// the router to the same instance, side by side, so their ratio is the
// router's cost.
func BenchmarkProxy(b *testing.B) {
	e := newEnv(b, Options{})
	srv := backend(b, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello, world\n")
	})
	host := e.service("default", "bench", "bench-1", RevisionConfig{Timeout: 5 * time.Minute}, srv)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(client.CloseIdleConnections)

	run := func(b *testing.B, url, host string) {
		b.ReportAllocs()
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Host = host
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, srv.URL, host) })
	b.Run("router", func(b *testing.B) { run(b, e.srv.URL, host) })
	b.Run("direct-parallel", func(b *testing.B) { runParallel(b, client, srv.URL, host) })
	b.Run("router-parallel", func(b *testing.B) { runParallel(b, client, e.srv.URL, host) })
}

func runParallel(b *testing.B, client *http.Client, url, host string) {
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Host = host
			resp, err := client.Do(req)
			if err != nil {
				panic(fmt.Sprint(err))
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
