package store

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"
)

// waitTimeout bounds every wait for an event; generous for a loaded
// 2-core machine running -race.
const waitTimeout = 10 * time.Second

func openAt(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openTest opens a new store in a temporary directory and returns it with its
// path, for reopening.
func openTest(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "store.db")
	return openAt(t, path, opts), path
}

// val returns a value function that stores s.
func val(s string) func(int64) ([]byte, error) {
	return func(int64) ([]byte, error) { return []byte(s), nil }
}

// versioned returns a value function that embeds the revision, as the
// apiserver embeds metadata.resourceVersion.
func versioned(name string) func(int64) ([]byte, error) {
	return func(rev int64) ([]byte, error) { return fmt.Appendf(nil, "%s@%d", name, rev), nil }
}

func mustCreate(t testing.TB, s *Store, k Key, v string) Entry {
	t.Helper()
	e, err := s.Create(k, val(v))
	if err != nil {
		t.Fatalf("Create %s: %v", k, err)
	}
	return e
}

func mustUpdate(t testing.TB, s *Store, k Key, v string) Entry {
	t.Helper()
	e, err := s.Update(k, 0, val(v))
	if err != nil {
		t.Fatalf("Update %s: %v", k, err)
	}
	return e
}

func mustDelete(t testing.TB, s *Store, k Key) Entry {
	t.Helper()
	e, err := s.Delete(k, 0)
	if err != nil {
		t.Fatalf("Delete %s: %v", k, err)
	}
	return e
}

// recv returns the next event of ch, failing the test if none comes in time
// or the channel is closed.
func recv(t testing.TB, ch <-chan Event) Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed, want an event")
		}
		return ev
	case <-time.After(waitTimeout):
		t.Fatal("no event within the deadline")
	}
	panic("unreachable")
}

// recvN receives n events.
func recvN(t testing.TB, ch <-chan Event, n int) []Event {
	t.Helper()
	evs := make([]Event, 0, n)
	for range n {
		evs = append(evs, recv(t, ch))
	}
	return evs
}

// awaitClosed drains ch until it is closed, failing if that does not happen
// in time, and returns how many events it drained.
func awaitClosed(t testing.TB, ch <-chan Event) int {
	t.Helper()
	deadline := time.After(waitTimeout)
	n := 0
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return n
			}
			n++
		case <-deadline:
			t.Fatalf("watch channel not closed within the deadline (%d events drained)", n)
		}
	}
}

// short summarizes events as "TYPE name@rev" for comparisons.
func short(evs []Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%s %s@%d", ev.Type, ev.Entry.Key.Name, ev.Entry.Revision)
	}
	return out
}

// detailed is short plus each event's value and previous value.
func detailed(evs []Event) []string {
	out := short(evs)
	for i, ev := range evs {
		out[i] += fmt.Sprintf(" %q<-%q", ev.Entry.Value, ev.Prev)
	}
	return out
}

// noise is size bytes that do not compress (the store compresses values),
// the same for the same seed.
func noise(size int, seed uint64) []byte {
	b := make([]byte, size)
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}
