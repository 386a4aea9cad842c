// Command incluster is a test server that calls the platform's API as
// in-cluster code does: with client-go's rest.InClusterConfig() (the
// KUBERNETES_SERVICE_HOST/PORT variables, the mounted ServiceAccount token
// and ca.crt) and the HTTP client client-go builds from it.
//
// It listens on $PORT (default 8080). Endpoints:
//
//	GET /get?path=P  GETs P from the API: JSON {"status": N, "body": "...", "error": "..."}
//	GET /            200 "ok" (the readiness probe's)
package main

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// result is /get's answer.
type result struct {
	Host   string `json:"host,omitempty"`
	Status int    `json:"status,omitempty"`
	Body   string `json:"body,omitempty"` // at most 4 KiB
	Error  string `json:"error,omitempty"`
}

func get(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if !strings.HasPrefix(p, "/") {
		http.Error(w, "path: required, starting with /", http.StatusBadRequest)
		return
	}
	var res result
	defer func() {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	}()
	// Read anew for each request, as a client made now would.
	cfg, err := rest.InClusterConfig()
	if err != nil {
		res.Error = "InClusterConfig: " + err.Error()
		return
	}
	res.Host = cfg.Host
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		res.Error = "HTTPClientFor: " + err.Error()
		return
	}
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+p, nil)
	if err != nil {
		res.Error = err.Error()
		return
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		res.Error = err.Error()
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	res.Status, res.Body = resp.StatusCode, string(b)
	if err != nil {
		res.Error = err.Error()
	}
}

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/get", get)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	s := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(s.ListenAndServe())
}
