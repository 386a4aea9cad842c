package pod

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/knbox/knbox/pkg/runtime"
)

// FuzzShimRequest: whatever a client of a shim's socket sends (it is the
// daemon's, mode 0600, but a request is input all the same), the shim
// answers with an error or does what was asked, and never crashes. Starts
// are left out: they would run containers.
func FuzzShimRequest(f *testing.F) {
	f.Add([]byte(`{"v":1,"op":"state"}`))
	f.Add([]byte(`{"v":1,"op":"kill","id":"x","signal":9}`))
	f.Add([]byte(`{"v":1,"op":"log","line":"hello\nworld"}`))
	f.Add([]byte(`{"v":2,"op":"shutdown"}`))
	f.Add([]byte(`{"v":1,"op":"delete","id":"../x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		mon, err := newLocalMonitor(runtime.NewProcess(filepath.Join(dir, "process")), filepath.Join(dir, "pod.log"), dir)
		if err != nil {
			t.Fatal(err)
		}
		defer mon.close()
		s := &shim{mon: mon, log: slog.New(slog.NewTextHandler(io.Discard, nil)), ctrs: map[string]*shimContainer{}, ended: make(chan struct{})}
		var req shimRequest
		if err := json.NewDecoder(io.LimitReader(bytes.NewReader(b), maxShimRequest)).Decode(&req); err != nil {
			return
		}
		if req.Op == "start" || req.Op == "wait" {
			return
		}
		resp := s.handle(context.Background(), req)
		if req.V != shimProtocol && resp.Error == "" {
			t.Fatalf("protocol %d accepted", req.V)
		}
		if _, err := json.Marshal(resp); err != nil {
			t.Fatal(err)
		}
	})
}
