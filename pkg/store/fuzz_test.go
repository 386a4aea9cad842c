package store

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
)

// maxFuzzOps bounds the operations decoded from one fuzz input.
const maxFuzzOps = 48

var fuzzKeys = []Key{
	{svc, "a", "x"}, {svc, "a", "y"}, {svc, "b", "x"}, {svc, "", "x"},
	{nsRes, "", "a"}, {nsRes, "", "b"},
}

// model is the reference the store is checked against: a map, a counter and
// the events the store should publish for svc.
type model struct {
	objects map[Key]Entry
	rev     int64
	events  []Event
	opts    Options
	sizes   []int64 // of every event's value, by revision - 1
	// extra is the value an event keeps of its key before it (the
	// store's prev bucket), by revision - 1; next names the key's next
	// event of a write still in the log (the store's next bucket).
	extra []int64
	next  map[int64]int64
	// The event log: events <= compacted are gone, events <= stripped
	// lost their values.
	compacted, stripped int64
}

func (m *model) write(typ EventType, k Key, value []byte) Entry {
	m.rev++
	e := Entry{Key: k, Value: value, Revision: m.rev}
	ev := Event{Type: typ, Entry: e}
	if cur, ok := m.objects[k]; ok {
		ev.Prev = cur.Value
		ev.prevRev = cur.Revision
	}
	m.sizes = append(m.sizes, int64(len(value)))
	m.extra = append(m.extra, 0)
	if m.next == nil {
		m.next = map[int64]int64{}
	}
	if ev.prevRev > 0 {
		if ev.prevRev <= m.compacted {
			m.extra[m.rev-1] = int64(len(ev.Prev))
		} else {
			m.next[ev.prevRev] = m.rev
		}
	}
	compacted := max(m.compacted, m.rev-int64(m.opts.EventLogSize))
	for r := m.compacted + 1; r <= compacted; r++ {
		if y, ok := m.next[r]; ok {
			if r > m.stripped {
				m.extra[y-1] = m.sizes[r-1]
			}
			delete(m.next, r)
		}
	}
	m.compacted = compacted
	m.stripped = max(m.stripped, m.compacted)
	var kept int64
	for r := m.stripped + 1; r <= m.rev; r++ {
		kept += m.sizes[r-1] + m.extra[r-1]
	}
	for kept > m.opts.EventLogBytes && m.stripped+1 < m.rev {
		m.stripped++
		kept -= m.sizes[m.stripped-1] + m.extra[m.stripped-1]
		m.extra[m.stripped-1] = 0
	}
	if typ == Deleted {
		delete(m.objects, k)
	} else {
		m.objects[k] = e
	}
	if k.Resource == svc {
		m.events = append(m.events, ev)
	}
	return e
}

// precondition is the model's answer to Update and Delete checks.
func (m *model) precondition(k Key, expect int64) error {
	cur, ok := m.objects[k]
	switch {
	case !ok:
		return ErrNotFound
	case expect != 0 && cur.Revision != expect:
		return ErrConflict
	}
	return nil
}

func (m *model) list(resource, ns string) []Entry {
	var out []Entry
	for _, e := range m.objects {
		if (filter{resource, ns}).match(e.Key) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.Name, b.Key.Name))
	})
	return out
}

// FuzzMutate runs a sequence of operations decoded from the input against
// the store and the model, and checks they agree on every result, on the
// event stream (across reopens) and on replays from the retained log.
//
// Input: byte 0 picks EventLogSize and the ring size, byte 1 EventLogBytes
// and CacheBytes, then 3 bytes per operation: kind, key, argument.
func FuzzMutate(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 1, 2, 0, 2, 4, 0, 0, 5, 1, 0, 6, 0, 0, 1, 0, 1})
	f.Add([]byte{7, 0, 0, 1, 0, 0, 1, 0, 1, 1, 1, 1, 1, 2, 1, 1, 2, 0, 2, 3, 1, 0})
	f.Add(append([]byte{0}, bytes.Repeat([]byte{0, 3, 0, 1, 3, 0, 2, 3, 1, 6, 0, 0}, 4)...))
	f.Add(append([]byte{0}, bytes.Repeat([]byte{0, 2, 9, 5, 2, 1, 1, 2, 2, 2, 2, 0}, 4)...))
	f.Add(append([]byte{3, 0x25}, bytes.Repeat([]byte{0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 4, 0, 1, 4, 1}, 4)...))
	f.Add(append([]byte{9, 0x13}, bytes.Repeat([]byte{0, 0, 0, 1, 0, 1, 6, 0, 0, 1, 1, 1, 2, 4, 0}, 4)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 {
			return
		}
		opts := Options{EventLogSize: 4 + int(in[0]%16), ringSize: 1 + int(in[0]/16%4)}
		if in[1] != 0 { // else the defaults: nothing loses its value
			opts.EventLogBytes = 8 + 8*int64(in[1]%16)
			opts.CacheBytes = 8 + 8*int64(in[1]/16%16)
		}
		in = in[1:]
		path := filepath.Join(t.TempDir(), "store.db")
		s, err := Open(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		m := &model{objects: map[Key]Entry{}, opts: opts}
		if m.opts, err = opts.withDefaults(); err != nil {
			t.Fatal(err)
		}
		var got []Event // events received so far on the svc watch
		watch := func() <-chan Event {
			ch, err := s.Watch(t.Context(), svc, "", m.rev, false)
			if m.rev == 0 {
				ch, err = s.Watch(t.Context(), svc, "", 0, false)
			}
			if err != nil {
				t.Fatalf("watch from %d: %v", m.rev, err)
			}
			return ch
		}
		ch := watch()
		drain := func() {
			for len(got) < len(m.events) {
				got = append(got, recv(t, ch))
			}
		}

		ops := in[1:]
		for i := 0; i+3 <= len(ops) && i/3 < maxFuzzOps; i += 3 {
			kind, k, arg := ops[i]%7, fuzzKeys[int(ops[i+1])%len(fuzzKeys)], ops[i+2]
			expect := int64(0) // arg%3: unconditional, current revision, a stale one
			if cur, ok := m.objects[k]; ok && arg%3 == 1 {
				expect = cur.Revision
			} else if arg%3 == 2 {
				expect = int64(arg) + 1000
			}
			value := versioned(fmt.Sprintf("%s#%d", k.Name, i))
			var (
				e       Entry
				err     error
				want    Entry
				wantErr error
			)
			switch kind {
			case 0:
				e, err = s.Create(k, value)
				if _, ok := m.objects[k]; ok {
					wantErr = ErrExists
				} else {
					v, _ := value(m.rev + 1)
					want = m.write(Added, k, v)
				}
			case 1:
				e, err = s.Update(k, expect, value)
				if wantErr = m.precondition(k, expect); wantErr == nil {
					v, _ := value(m.rev + 1)
					want = m.write(Modified, k, v)
				}
			case 2:
				e, err = s.Delete(k, expect)
				if wantErr = m.precondition(k, expect); wantErr == nil {
					want = m.write(Deleted, k, m.objects[k].Value)
				}
			case 3:
				e, err = s.Mutate(k, func(*Entry, int64) (Mutation, error) { return Mutation{Noop: true}, nil })
				want, wantErr = m.objects[k], m.precondition(k, 0)
			case 4:
				e, err = s.Get(k)
				want, wantErr = m.objects[k], m.precondition(k, 0)
			case 5:
				ns := []string{"", "a", "b"}[arg%3]
				list, rev, err := s.List(k.Resource, ns)
				if err != nil || rev != m.rev || fmt.Sprint(list) != fmt.Sprint(m.list(k.Resource, ns)) {
					t.Fatalf("op %d: List(%s, %q) = %v at %d, %v; want %v at %d", i/3, k.Resource, ns, list, rev, err, m.list(k.Resource, ns), m.rev)
				}
				continue
			case 6:
				drain()
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if s, err = Open(path, opts); err != nil {
					t.Fatal(err)
				}
				awaitClosed(t, ch)
				ch = watch()
				continue
			}
			if wantErr != nil {
				if !errors.Is(err, wantErr) {
					t.Fatalf("op %d (%d on %s, expect %d): err = %v, want %v", i/3, kind, k, expect, err, wantErr)
				}
				continue
			}
			if err != nil || e.Key != want.Key || e.Revision != want.Revision || !bytes.Equal(e.Value, want.Value) {
				t.Fatalf("op %d (%d on %s): got %+v, %v; want %+v", i/3, kind, k, e, err, want)
			}
		}
		if s.Revision() != m.rev {
			t.Fatalf("Revision = %d, model %d", s.Revision(), m.rev)
		}
		drain()
		if !slices.Equal(detailed(got), detailed(m.events)) {
			t.Fatalf("events\n%q\nwant\n%q", detailed(got), detailed(m.events))
		}

		// Replays from the retained log: the oldest allowed start and a
		// recent one agree with the model, but for values the log no longer
		// keeps (ErrGone, PrevCompacted), which only the model's stripped
		// events may explain; one before the log is gone.
		for _, from := range []int64{max(m.compacted, 1), max(m.rev-2, 1)} {
			if from >= m.rev {
				continue
			}
			var want []Event
			mayBeGone := false
			for _, ev := range m.events {
				if ev.Entry.Revision > from {
					want = append(want, ev)
					mayBeGone = mayBeGone || ev.Entry.Revision <= m.stripped
				}
			}
			replay, err := s.Watch(t.Context(), svc, "", from, false)
			if errors.Is(err, ErrGone) && mayBeGone {
				continue
			}
			if err != nil {
				t.Fatalf("replay from %d (log compacted to %d, stripped to %d): %v", from, m.compacted, m.stripped, err)
			}
			r := recvN(t, replay, len(want))
			for i := range r {
				if ev := &r[i]; ev.PrevCompacted && ev.Prev == nil && want[i].prevRev > 0 && want[i].prevRev <= m.stripped {
					ev.Prev = want[i].Prev // unknown, and rightly so
				}
			}
			if !slices.Equal(detailed(r), detailed(want)) {
				t.Fatalf("replay from %d\n%q\nwant\n%q", from, detailed(r), detailed(want))
			}
		}
		if m.compacted > 1 {
			if _, err := s.Watch(t.Context(), svc, "", m.compacted-1, false); !errors.Is(err, ErrGone) {
				t.Fatalf("watch from %d with the log compacted to %d: err = %v", m.compacted-1, m.compacted, err)
			}
		}
		for k := range maps.Keys(m.objects) {
			if e, err := s.Get(k); err != nil || e.Revision != m.objects[k].Revision {
				t.Fatalf("final Get %s = %+v, %v; want %+v", k, e, err, m.objects[k])
			}
		}
	})
}
