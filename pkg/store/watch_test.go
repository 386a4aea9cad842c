package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestWatchFromZero(t *testing.T) {
	tests := []struct {
		name    string
		initial bool
		want    []string
	}{
		{"initial", true, []string{"ADDED a@1", "ADDED b@3", "MODIFIED a@4", "DELETED b@5", "ADDED c@6"}},
		{"live only", false, []string{"MODIFIED a@4", "DELETED b@5", "ADDED c@6"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := openTest(t, Options{})
			mustCreate(t, s, keyA, "a1")
			mustCreate(t, s, Key{svc, "other", "x"}, "x") // another namespace, same resource
			mustCreate(t, s, keyB, "b1")
			ch, err := s.Watch(t.Context(), svc, "default", 0, tt.initial)
			if err != nil {
				t.Fatal(err)
			}
			mustUpdate(t, s, keyA, "a2")
			mustDelete(t, s, keyB)
			mustCreate(t, s, Key{svc, "default", "c"}, "c1")
			got := recvN(t, ch, len(tt.want))
			if !slices.Equal(short(got), tt.want) {
				t.Fatalf("events = %q, want %q", short(got), tt.want)
			}
			if del := got[len(got)-2]; string(del.Entry.Value) != "b1" || string(del.Prev) != "b1" {
				t.Fatalf("Deleted event value %q prev %q, want b1 b1", del.Entry.Value, del.Prev)
			}
			if mod := got[len(got)-3]; string(mod.Entry.Value) != "a2" || string(mod.Prev) != "a1" {
				t.Fatalf("Modified event value %q prev %q, want a2 a1", mod.Entry.Value, mod.Prev)
			}
		})
	}
}

// TestWatchInitialNoGap starts watches with initial events while a writer
// runs, and checks each stream is exactly the state at some revision S (the
// snapshot) followed by every event after S: no gap, no duplicate.
func TestWatchInitialNoGap(t *testing.T) {
	s, _ := openTest(t, Options{})
	const keys, writes, watches = 5, 60, 6
	var history []Event // written by the writer, read after writerDone
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for i := range writes {
			k := Key{svc, "default", fmt.Sprintf("k%d", i%keys)}
			var (
				typ  EventType
				prev []byte
			)
			e, err := s.Mutate(k, func(cur *Entry, _ int64) (Mutation, error) {
				if cur != nil {
					prev = cur.Value
				}
				switch {
				case cur == nil:
					typ = Added
				case i%4 == 3:
					typ = Deleted
					return Mutation{Delete: true, Value: cur.Value}, nil
				default:
					typ = Modified
				}
				return Mutation{Value: fmt.Appendf(nil, "%d", i)}, nil
			})
			if err != nil {
				t.Error(err)
				return
			}
			history = append(history, Event{Type: typ, Entry: e, Prev: prev})
		}
	}()

	type started struct {
		ch            <-chan Event
		before, after int64 // the snapshot revision S is in [before, after]
	}
	var ws []started
	for range watches {
		before := s.Revision()
		ch, err := s.Watch(t.Context(), svc, "", 0, true)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, started{ch, before, s.Revision()})
		// Await a few more writes before the next watch.
		next, err := s.Watch(t.Context(), svc, "", 0, false)
		if err != nil {
			t.Fatal(err)
		}
		for range writes / watches {
			select {
			case <-next:
			case <-writerDone:
			}
		}
	}
	<-writerDone
	sentinel := mustCreate(t, s, Key{svc, "default", "sentinel"}, "end")
	history = append(history, Event{Type: Added, Entry: sentinel})

	// expected is what a watch whose snapshot was taken at S must deliver.
	expected := func(S int64) []string {
		state := map[string]Entry{}
		var live []Event
		for _, h := range history {
			if h.Entry.Revision > S {
				live = append(live, h)
				continue
			}
			if h.Type == Deleted {
				delete(state, h.Entry.Key.Name)
			} else {
				state[h.Entry.Key.Name] = h.Entry
			}
		}
		var evs []Event
		for _, name := range slices.Sorted(maps.Keys(state)) {
			evs = append(evs, Event{Type: Added, Entry: state[name]})
		}
		return append(detailed(evs), detailed(live)...)
	}
	for i, w := range ws {
		var got []Event
		for len(got) == 0 || got[len(got)-1].Entry.Revision != sentinel.Revision {
			got = append(got, recv(t, w.ch))
		}
		ok := false
		for S := w.before; S <= w.after && !ok; S++ {
			ok = slices.Equal(detailed(got), expected(S))
		}
		if !ok {
			t.Fatalf("watch %d started in [%d, %d] got %q\nwant %q (S=%d)", i, w.before, w.after, detailed(got), expected(w.before), w.before)
		}
	}
}

// writeSeries writes n objects name0..name(n-1) in namespace ns, each with
// its name as value, and returns their entries.
func writeSeries(t testing.TB, s *Store, ns, name string, n int) []Entry {
	t.Helper()
	var out []Entry
	for i := range n {
		k := Key{svc, ns, fmt.Sprintf("%s%d", name, i)}
		out = append(out, mustCreate(t, s, k, k.Name))
	}
	return out
}

func TestWatchFromPast(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		from int64
		drop bool // DropCache after the first writes
	}{
		{"from ring", Options{}, 3, false},
		{"from bbolt log then ring", Options{ringSize: 2}, 3, false},
		{"from oldest retained", Options{EventLogSize: 8, ringSize: 2}, 2, false},
		{"from current", Options{}, 10, false},
		{"from bbolt log after DropCache", Options{}, 3, true},
		{"from current after DropCache", Options{}, 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := openTest(t, tt.opts)
			writeSeries(t, s, "default", "o", 10) // revisions 1..10
			if tt.drop {
				s.DropCache()
			}
			ch, err := s.Watch(t.Context(), svc, "default", tt.from, false)
			if err != nil {
				t.Fatal(err)
			}
			writeSeries(t, s, "default", "live", 2) // 11, 12
			var want []string
			for rev := tt.from + 1; rev <= 10; rev++ {
				want = append(want, fmt.Sprintf("ADDED o%d@%d", rev-1, rev))
			}
			want = append(want, "ADDED live0@11", "ADDED live1@12")
			if got := short(recvN(t, ch, len(want))); !slices.Equal(got, want) {
				t.Fatalf("events = %q, want %q", got, want)
			}
		})
	}
}

func TestWatchResumeAfterReopen(t *testing.T) {
	for _, opts := range []Options{{}, {ringSize: 3}} {
		t.Run(fmt.Sprintf("ring%d", opts.ringSize), func(t *testing.T) {
			t.Parallel()
			s, path := openTest(t, opts)
			writeSeries(t, s, "default", "o", 6)
			mustUpdate(t, s, Key{svc, "default", "o1"}, "changed") // 7
			mustDelete(t, s, Key{svc, "default", "o2"})            // 8
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openAt(t, path, opts)
			ch, err := s.Watch(t.Context(), svc, "", 4, false)
			if err != nil {
				t.Fatal(err)
			}
			mustCreate(t, s, Key{svc, "default", "after"}, "after") // 9
			got := recvN(t, ch, 5)
			want := []string{"ADDED o4@5", "ADDED o5@6", "MODIFIED o1@7", "DELETED o2@8", "ADDED after@9"}
			if !slices.Equal(short(got), want) {
				t.Fatalf("events = %q, want %q", short(got), want)
			}
			if string(got[2].Prev) != "o1" || string(got[2].Entry.Value) != "changed" || string(got[3].Prev) != "o2" {
				t.Fatalf("values not kept across reopen: %q", detailed(got))
			}
		})
	}
}

func TestWatchGone(t *testing.T) {
	s, path := openTest(t, Options{EventLogSize: 5})
	writeSeries(t, s, "default", "o", 20) // events 16..20 retained
	check := func(s *Store) {
		t.Helper()
		for _, tt := range []struct {
			from int64
			gone bool
		}{{1, true}, {14, true}, {15, false}, {20, false}, {25, false}, {0, false}} {
			ch, err := s.Watch(t.Context(), svc, "", tt.from, false)
			if gotGone := errors.Is(err, ErrGone); gotGone != tt.gone || (err != nil && !gotGone) {
				t.Fatalf("Watch from %d: err = %v, want gone %v", tt.from, err, tt.gone)
			}
			if err == nil && tt.from == 15 {
				if ev := recv(t, ch); ev.Entry.Revision != 16 {
					t.Fatalf("first event after 15 is %d", ev.Entry.Revision)
				}
			}
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openAt(t, path, Options{EventLogSize: 5}))
}

// TestCompactionShrinksLog lowers EventLogSize across a reopen: the log
// shrinks by a bounded number of events per write until it fits.
func TestCompactionShrinksLog(t *testing.T) {
	s, path := openTest(t, Options{EventLogSize: 100})
	writeSeries(t, s, "default", "o", 60)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, Options{EventLogSize: 10})
	count := func() int {
		n := 0
		if err := s.db.View(func(tx *bolt.Tx) error { n = tx.Bucket(bucketEvents).Stats().KeyN; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 60 {
		t.Fatalf("reopen changed the log: %d events", n)
	}
	prev := 60
	for i := range 10 {
		mustCreate(t, s, Key{svc, "x", fmt.Sprint(i)}, "x")
		n := count()
		if n < 10 || n < prev+1-maxCompactPerWrite {
			t.Fatalf("write %d: log went from %d to %d events", i, prev, n)
		}
		prev = n
	}
	if prev != 10 {
		t.Fatalf("log has %d events, want 10", prev)
	}
	if _, err := s.Watch(t.Context(), svc, "", 60, false); err != nil {
		t.Fatalf("watch inside the log: %v", err)
	}
	if _, err := s.Watch(t.Context(), svc, "", 59, false); !errors.Is(err, ErrGone) {
		t.Fatalf("watch before the log: %v", err)
	}
}

func TestWatchFilter(t *testing.T) {
	s, _ := openTest(t, Options{})
	all, err := s.Watch(t.Context(), svc, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	nsA, err := s.Watch(t.Context(), svc, "a", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := s.Watch(t.Context(), nsRes, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, Key{svc, "b", "1"}, "")
	mustCreate(t, s, Key{svc, "a", "2"}, "")
	mustCreate(t, s, Key{nsRes, "", "3"}, "")
	mustCreate(t, s, Key{svc + "x", "a", "4"}, "")
	mustCreate(t, s, Key{svc, "ab", "5"}, "")
	mustCreate(t, s, Key{svc, "a", "6"}, "")
	mustCreate(t, s, Key{nsRes, "", "7"}, "")
	for _, tt := range []struct {
		name string
		ch   <-chan Event
		want []string
	}{
		{"all namespaces", all, []string{"ADDED 1@1", "ADDED 2@2", "ADDED 5@5", "ADDED 6@6"}},
		{"namespace a", nsA, []string{"ADDED 2@2", "ADDED 6@6"}},
		{"cluster scoped", cluster, []string{"ADDED 3@3", "ADDED 7@7"}},
	} {
		if got := short(recvN(t, tt.ch, len(tt.want))); !slices.Equal(got, tt.want) {
			t.Errorf("%s: events = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestWatchFutureRevision(t *testing.T) {
	s, _ := openTest(t, Options{})
	mustCreate(t, s, keyA, "a")
	ch, err := s.Watch(t.Context(), svc, "", 3, false)
	if err != nil {
		t.Fatal(err)
	}
	writeSeries(t, s, "default", "o", 4) // 2..5
	want := []string{"ADDED o2@4", "ADDED o3@5"}
	if got := short(recvN(t, ch, 2)); !slices.Equal(got, want) {
		t.Fatalf("events = %q, want %q", got, want)
	}
}

func TestWatchSlowWatcherClosed(t *testing.T) {
	const buffer = 4
	s, _ := openTest(t, Options{WatchBuffer: buffer})
	slow, err := s.Watch(t.Context(), svc, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := s.Watch(t.Context(), svc, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	const writes = 3 * buffer
	fastDone := make(chan int)
	go func() {
		n := 0
		for range fast {
			if n++; n == writes {
				break
			}
		}
		fastDone <- n
	}()
	writeSeries(t, s, "default", "o", writes)
	if n := <-fastDone; n != writes {
		t.Fatalf("fast watcher got %d events, want %d", n, writes)
	}
	// The slow one gets what was buffered (in order, from the start) and then
	// its channel is closed.
	got := 0
	for ev := range slow {
		got++
		if ev.Entry.Revision != int64(got) {
			t.Fatalf("slow watcher event %d has revision %d", got, ev.Entry.Revision)
		}
		if got > writes {
			t.Fatal("slow watcher never closed")
		}
	}
	if got >= writes || got < buffer {
		t.Fatalf("slow watcher got %d of %d events before closing, want between %d and %d", got, writes, buffer, writes-1)
	}
}

func TestWatchContextCancel(t *testing.T) {
	s, _ := openTest(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := s.Watch(ctx, svc, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, keyA, "a")
	cancel()
	awaitClosed(t, ch)
	// The store no longer tracks it.
	s.mu.Lock()
	n := len(s.watchers[svc])
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d watchers still registered", n)
	}
	mustCreate(t, s, keyB, "b")
}

func TestCloseClosesWatches(t *testing.T) {
	s, _ := openTest(t, Options{})
	writeSeries(t, s, "default", "o", 3)
	var chans []<-chan Event
	for _, from := range []int64{0, 1, 2, 100} {
		ch, err := s.Watch(context.Background(), svc, "", from, from == 0)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		// Close waited for the goroutines: the channels are closed already
		// (they are unbuffered, so nothing is pending in them either).
		select {
		case ev, ok := <-ch:
			if ok {
				t.Fatalf("watch %d: event %+v after Close", i, ev)
			}
		default:
			t.Fatalf("watch %d: channel still open after Close", i)
		}
	}
}

// TestEventsOwnTheirBytes checks that a caller reusing its value buffer after
// a write does not change what watchers receive.
func TestEventsOwnTheirBytes(t *testing.T) {
	s, _ := openTest(t, Options{})
	ch, err := s.Watch(t.Context(), svc, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	buf := []byte("first")
	if _, err := s.Create(keyA, func(int64) ([]byte, error) { return buf, nil }); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXX")
	if ev := recv(t, ch); string(ev.Entry.Value) != "first" {
		t.Fatalf("event value %q, want %q", ev.Entry.Value, "first")
	}
	late, err := s.Watch(t.Context(), svc, "", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if ev := recv(t, late); string(ev.Entry.Value) != "first" {
		t.Fatalf("stored value %q, want %q", ev.Entry.Value, "first")
	}
}

// TestWatchProgress: a progress watch reports the store's revision once
// writes moved it, after its own events too, and not while nothing
// changes.
func TestWatchProgress(t *testing.T) {
	const every = 20 * time.Millisecond
	s, _ := openTest(t, Options{})
	mustCreate(t, s, keyA, "a") // 1
	if _, err := s.WatchProgress(t.Context(), svc, "", 0, false, 0); err == nil {
		t.Fatal("a zero interval: no error")
	}
	ch, err := s.WatchProgress(t.Context(), svc, "", 0, false, every)
	if err != nil {
		t.Fatal(err)
	}
	quiet := func(when string) {
		t.Helper()
		select { // ten intervals, each of which could have reported
		case ev := <-ch:
			t.Fatalf("%s: got %s, want nothing", when, short([]Event{ev}))
		case <-time.After(10 * every):
		}
	}
	quiet("nothing written")
	mustCreate(t, s, Key{nsRes, "", "n1"}, "") // 2
	mustCreate(t, s, Key{nsRes, "", "n2"}, "") // 3
	// A tick between the two writes reports 2 first.
	for {
		ev := recv(t, ch)
		if ev.Type != Progress || ev.Entry.Revision > 3 || ev.Entry.Revision < 2 {
			t.Fatalf("after other resources' writes: %q, want PROGRESS @2 or @3", short([]Event{ev}))
		}
		if ev.Entry.Revision == 3 {
			break
		}
	}
	quiet("after the progress")
	mustCreate(t, s, Key{svc, "default", "b"}, "") // 4
	if got, want := short(recvN(t, ch, 2)), []string{"ADDED b@4", "PROGRESS @4"}; !slices.Equal(got, want) {
		t.Fatalf("after its own write: %q, want %q", got, want)
	}
	quiet("after its own event")

	// A watch from the future reports nothing until the store passes it.
	future, err := s.WatchProgress(t.Context(), nsRes, "", 6, false, every)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, Key{svc, "default", "c"}, "") // 5
	if got, want := short(recvN(t, ch, 2)), []string{"ADDED c@5", "PROGRESS @5"}; !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
	mustCreate(t, s, Key{svc, "default", "d"}, "") // 6
	mustCreate(t, s, Key{svc, "default", "e"}, "") // 7
	if got, want := short(recvN(t, future, 1)), []string{"PROGRESS @7"}; !slices.Equal(got, want) {
		t.Fatalf("a watch from 6: %q, want %q", got, want)
	}
}
