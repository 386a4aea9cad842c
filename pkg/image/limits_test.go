package image

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSparseWriter: what it writes reads back the same, and aligned blocks
// of zeros take no disk blocks.
func TestSparseWriter(t *testing.T) {
	t.Parallel()
	var want []byte
	want = append(want, bytes.Repeat([]byte("a"), 100)...)  // data, unaligned end
	want = append(want, make([]byte, 64<<10)...)            // zeros: holes from the next block
	want = append(want, bytes.Repeat([]byte("b"), 5000)...) // data across blocks
	want = append(want, make([]byte, 1<<20)...)             // trailing zeros
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &sparseWriter{f: f}
	for rest := want; len(rest) > 0; { // odd write sizes
		n := min(len(rest), 7777)
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := w.finish(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes, %v; want %d", len(got), err, len(want))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.Name(), &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 32<<10 {
		t.Errorf("%d bytes on disk for %d bytes of data", used, 5100)
	}
}

// TestLayerBudget: entries count against the layer's and the image's
// limits, with errors naming the configuration key.
func TestLayerBudget(t *testing.T) {
	t.Parallel()
	ib := &imageBudget{maxBytes: 100, maxFiles: 2}
	a := &layerBudget{maxBytes: 60, maxFiles: 2, image: ib}
	b := &layerBudget{maxBytes: 60, maxFiles: 2, image: ib}
	if err := a.entry(50); err != nil {
		t.Fatal(err)
	}
	if err := a.entry(20); err == nil || !strings.Contains(err.Error(), "maxLayerBytes") || !isContentError(err) {
		t.Errorf("layer bytes: %v", err)
	}
	if err := b.entry(0); err != nil {
		t.Fatal(err)
	}
	if err := b.entry(0); err == nil || !strings.Contains(err.Error(), "maxImageFiles") {
		t.Errorf("image files: %v", err)
	}
	c := &layerBudget{maxBytes: 1000, maxFiles: 1}
	_ = c.entry(0)
	if err := c.entry(0); err == nil || !strings.Contains(err.Error(), "maxLayerFiles") {
		t.Errorf("layer files: %v", err)
	}
	var nilBudget *layerBudget
	if err := nilBudget.entry(1 << 40); err != nil {
		t.Errorf("no budget: %v", err)
	}
}

// TestBackoff: a failed blob waits, doubling up to the maximum; a success
// forgets it; the number remembered is bounded.
func TestBackoff(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	b := &backoff{first: 10 * time.Second, max: 40 * time.Second, now: func() time.Time { return now }}
	reason := errors.New("the blob is sha256:x, not sha256:y")
	for i, wait := range []time.Duration{10, 20, 40, 40} {
		b.fail("d", reason)
		err := b.wait("d")
		if err == nil || !errors.Is(err, reason) || !strings.Contains(err.Error(), "not fetched again for "+(wait*time.Second).String()) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
		now = now.Add(wait*time.Second - time.Second)
		if b.wait("d") == nil {
			t.Fatalf("failure %d: fetched again before its backoff ended", i+1)
		}
		now = now.Add(time.Second)
		if err := b.wait("d"); err != nil {
			t.Fatalf("failure %d: still waiting after its backoff: %v", i+1, err)
		}
	}
	b.succeed("d")
	b.fail("d", reason)
	if err := b.wait("d"); err == nil || !strings.Contains(err.Error(), "for 10s") {
		t.Errorf("after a success the backoff starts over: %v", err)
	}
	for i := range maxRemembered + 10 {
		b.fail(string(rune('a'+i%26))+strings.Repeat("x", i), reason)
	}
	if len(b.failures) > maxRemembered {
		t.Errorf("%d failures remembered", len(b.failures))
	}
}
