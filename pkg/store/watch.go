package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// watcher is one Watch. Its goroutine first sends the backlog (snapshot and
// catch-up events), then forwards live events that dispatch queues.
//
// The live events wait in a slice that grows with the backlog, not in a
// channel of WatchBuffer events: a channel's buffer is allocated whole when
// the watch starts (some 130 KiB for 1000 events), and every informer and
// API watch holds one for its life, idle or not.
type watcher struct {
	f     filter
	from  int64         // only events with a revision > from are delivered
	every time.Duration // how often to look for progress to report; 0: never
	out   chan Event
	// wake has a token when queue or dropped changed since the goroutine
	// last looked.
	wake chan struct{}

	mu      sync.Mutex
	queue   []Event // live events not yet taken by the goroutine
	pending int64   // the bytes of the values of the events in queue
	dropped bool    // fell behind: the goroutine sends queue, then ends
}

// push queues ev unless the watcher already holds max events or maxBytes
// bytes of values (with at least one event queued); it reports whether it
// did.
func (w *watcher) push(ev Event, max int, maxBytes int64) bool {
	size := eventBytes(ev)
	w.mu.Lock()
	ok := len(w.queue) < max && !(w.pending+size > maxBytes && w.pending > 0)
	if ok {
		w.queue = append(w.queue, ev)
		w.pending += size
	}
	w.mu.Unlock()
	if ok {
		w.signal()
	}
	return ok
}

// drop marks the watcher fallen behind: its goroutine sends what is queued
// and ends the watch.
func (w *watcher) drop() {
	w.mu.Lock()
	w.dropped = true
	w.mu.Unlock()
	w.signal()
}

func (w *watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest queued event, as a receive from a channel would
// (so the bounds count exactly what a channel's buffer held). It reports
// whether there was one, and whether the watcher was dropped.
func (w *watcher) next() (ev Event, ok, dropped bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		w.queue = nil // the backing array of a burst goes
		return Event{}, false, w.dropped
	}
	ev = w.queue[0]
	w.queue[0] = Event{} // let its bytes go
	w.queue = w.queue[1:]
	w.pending -= eventBytes(ev)
	return ev, true, w.dropped
}

// logChunkBytes bounds the values of logged events a resuming watcher reads
// from the file at once; it sends them before it reads more.
const logChunkBytes = 4 << 20

// Watch streams the events of resource in namespace ("" = all namespaces)
// with a revision > from.
//
// With from == 0 the watch starts at the current revision and, when initial
// is true, first emits one synthetic Added event per existing object (ordered
// by namespace and name, with its stored revision), then live events, with no
// gap and no duplicate between the two. With from > 0 it first replays the
// retained events after from, or returns ErrGone if some of them were
// compacted away or, for events of this resource and namespace, lost their
// values (see Options.EventLogBytes); a from beyond the current revision
// waits for later events. initial only applies to from == 0.
//
// Replayed Modified and Deleted events carry their previous value when the
// log still has it, and PrevCompacted otherwise.
//
// The channel is closed when ctx is done, when the receiver falls more than
// WatchBuffer events or WatchBufferBytes behind, or on Close; the caller
// re-watches from the last revision it saw.
func (s *Store) Watch(ctx context.Context, resource, namespace string, from int64, initial bool) (<-chan Event, error) {
	return s.watch(ctx, resource, namespace, from, initial, 0)
}

// WatchProgress is Watch that also reports progress, as etcd's progress
// notifications do: every interval, if the store's revision moved since
// the watch's start or its last Progress event, and nothing of the watch
// is waiting to be sent, it sends a Progress event with the store's
// revision (also after the watch's own events: the receiver may have
// filtered them, as the API server's selectors do). A
// client that resumes from that revision misses nothing, and resumes
// from the ring instead of reading the file's log from where the last
// event of its resource happened to be.
func (s *Store) WatchProgress(ctx context.Context, resource, namespace string, from int64, initial bool, every time.Duration) (<-chan Event, error) {
	if every <= 0 {
		return nil, fmt.Errorf("watch %s: progress interval %v: must be positive", resource, every)
	}
	return s.watch(ctx, resource, namespace, from, initial, every)
}

func (s *Store) watch(ctx context.Context, resource, namespace string, from int64, initial bool, every time.Duration) (<-chan Event, error) {
	if from < 0 {
		return nil, fmt.Errorf("watch %s from %d: negative revision", resource, from)
	}
	f := filter{resource: resource, namespace: namespace}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil, fmt.Errorf("watch %s: %w", resource, ErrClosed)
	}
	cur := s.rev.Load()
	if from == 0 {
		from = cur
	} else {
		initial = false
		if from < s.compacted {
			s.mu.Unlock()
			return nil, fmt.Errorf("watch %s from %d, oldest retained is %d: %w", resource, from, s.compacted+1, ErrGone)
		}
	}

	// Events up to cur come from a snapshot, the log or the ring; later
	// ones from dispatch. A read transaction begun here, while no write is
	// in flight, sees exactly revision cur; the goroutine reads it without
	// holding mu.
	var (
		tx      *bolt.Tx
		backlog []Event
		// Catch-up events older than the ring are read from the log in
		// bbolt: those in (from, dbUntil].
		dbUntil  int64
		stripped = s.stripped
		ringFrom = s.ring.first()
	)
	if !initial && from < cur && from+1 < ringFrom {
		dbUntil = ringFrom - 1
	}
	if !initial && from < cur {
		backlog = s.ring.since(nil, from, f)
	}
	needTx := initial || dbUntil > 0 || slices.ContainsFunc(backlog, func(ev Event) bool { return ev.prevRev > 0 && ev.Prev == nil })
	if needTx {
		var err error
		if tx, err = s.db.Begin(false); err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("watch %s: %w", resource, err)
		}
	}
	w := &watcher{
		f:     f,
		from:  from,
		every: every,
		out:   make(chan Event),
		wake:  make(chan struct{}, 1),
	}
	set := s.watchers[resource]
	if set == nil {
		set = make(map[*watcher]struct{})
		s.watchers[resource] = set
	}
	set[w] = struct{}{}
	// Counted under mu, where Close cannot be between its check of closed
	// and its Wait (Add racing with Wait is a data race, and Close could
	// close the database under the snapshot).
	s.wg.Add(1)
	s.mu.Unlock()

	// Outside mu, on the snapshot: events of this resource that lost their
	// values cannot be replayed.
	if until := min(stripped, dbUntil); !initial && from < until {
		if rev, err := strippedMatch(tx, f, from, until); err != nil || rev > 0 {
			_ = tx.Rollback()
			s.unregister(w)
			s.wg.Done()
			if err == nil {
				err = fmt.Errorf("watch %s from %d: the log no longer keeps the value of event %d: %w", resource, from, rev, ErrGone)
			}
			return nil, err
		}
	}
	go s.run(ctx, w, tx, initial, dbUntil, backlog)
	return w.out, nil
}

// run is a watcher's goroutine.
func (s *Store) run(ctx context.Context, w *watcher, tx *bolt.Tx, initial bool, dbUntil int64, backlog []Event) {
	defer s.wg.Done()
	defer close(w.out)
	defer s.unregister(w)

	send := func(ev Event) bool {
		select {
		case w.out <- ev:
			return true
		case <-ctx.Done():
		case <-s.done:
		}
		return false
	}
	if tx != nil {
		ok := s.sendHead(w, tx, initial, dbUntil, backlog, send)
		if !ok {
			return
		}
	}
	for _, ev := range backlog {
		if !send(ev) {
			return
		}
	}
	var tick <-chan time.Time
	reported := w.from // the last revision a Progress event reported
	if w.every > 0 {
		t := time.NewTicker(w.every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
			if rev, ok := s.progress(w); ok && rev > reported {
				if !send(Event{Type: Progress, Entry: Entry{Revision: rev}}) {
					return
				}
				reported = rev
			}
		case <-w.wake:
			for {
				ev, ok, dropped := w.next()
				if !ok {
					if dropped {
						return
					}
					break
				}
				if !send(ev) {
					return
				}
			}
		case <-ctx.Done():
			return
		case <-s.done:
			return
		}
	}
}

// sendHead sends what comes before the ring's backlog (the snapshot, or the
// logged events in (w.from, dbUntil], in chunks of logChunkBytes), and
// resolves the previous values of the backlog from the log. It ends tx. It
// reports false when the watch must end: sending failed, or the file could
// not be read (the caller re-watches, and a re-watch or the next read
// surfaces the error).
func (s *Store) sendHead(w *watcher, tx *bolt.Tx, initial bool, dbUntil int64, backlog []Event, send func(Event) bool) bool {
	for i := range backlog {
		if backlog[i].prevRev > 0 && backlog[i].Prev == nil {
			prevFromLog(tx, &backlog[i])
		}
	}
	if initial {
		head, err := snapshot(tx, w.f)
		_ = tx.Rollback()
		if err != nil {
			return false
		}
		for _, ev := range head {
			if !send(ev) {
				return false
			}
		}
		return true
	}
	from := w.from
	for from < dbUntil {
		if tx == nil {
			// A later chunk: the log may have moved on meanwhile.
			var err error
			if tx, err = s.db.Begin(false); err != nil {
				return false
			}
		}
		chunk, last, err := logChunk(tx, w.f, from, dbUntil, logChunkBytes)
		_ = tx.Rollback()
		tx = nil
		if err != nil {
			return false
		}
		for _, ev := range chunk {
			if !send(ev) {
				return false
			}
		}
		from = last
	}
	if tx != nil {
		_ = tx.Rollback()
	}
	return true
}

// prevFromLog sets ev's previous value from the log in tx, or PrevCompacted
// when the log no longer has it.
func prevFromLog(tx *bolt.Tx, ev *Event) {
	if pv := tx.Bucket(bucketPrev).Get(encodeRevision(ev.Entry.Revision)); pv != nil {
		if v, err := decodePrev(pv); err == nil {
			ev.Prev = v
			return
		}
		ev.PrevCompacted = true // unreadable: as good as gone
		return
	}
	k := encodeRevision(ev.prevRev)
	if v := tx.Bucket(bucketEvents).Get(k); v != nil {
		if r, err := decodeRecord(k, v, true); err == nil && !r.stripped && r.key == ev.Entry.Key {
			ev.Prev = r.value
			if ev.Prev == nil {
				ev.Prev = []byte{}
			}
			return
		}
	}
	ev.PrevCompacted = true
}

// strippedMatch returns the revision of the first event in (from, until]
// that matches f and lost its value, or 0.
func strippedMatch(tx *bolt.Tx, f filter, from, until int64) (int64, error) {
	c := tx.Bucket(bucketEvents).Cursor()
	for k, v := c.Seek(encodeRevision(from + 1)); k != nil; k, v = c.Next() {
		r, err := decodeRecord(k, v, false)
		if err != nil {
			return 0, err
		}
		if r.rev > until {
			break
		}
		if r.stripped && f.match(r.key) {
			return r.rev, nil
		}
	}
	return 0, nil
}

// progress returns the store's revision and whether every event of w up to
// it has been taken by w's goroutine (which sends what it takes before it
// looks again). Under mu no write is between its commit and its dispatch.
func (s *Store) progress(w *watcher) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rev := s.rev.Load()
	w.mu.Lock()
	defer w.mu.Unlock()
	return rev, len(w.queue) == 0 && !w.dropped
}

func (s *Store) unregister(w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget(w)
}

// forget removes w from the watchers; mu must be held.
func (s *Store) forget(w *watcher) {
	set := s.watchers[w.f.resource]
	if _, ok := set[w]; !ok {
		return
	}
	delete(set, w)
	if len(set) == 0 {
		delete(s.watchers, w.f.resource)
	}
}

// eventBytes is what an event's values weigh in a watcher's backlog.
func eventBytes(ev Event) int64 { return int64(len(ev.Entry.Value) + len(ev.Prev)) }

// dispatch hands ev to the watchers of its resource. It is called with mu
// held, in revision order. A watcher whose buffer is full, by count or by
// bytes, is dropped: its goroutine sends what is buffered and closes its
// channel.
func (s *Store) dispatch(ev Event) {
	for w := range s.watchers[ev.Entry.Key.Resource] {
		if ev.Entry.Revision <= w.from || !w.f.match(ev.Entry.Key) {
			continue
		}
		if !w.push(ev, s.opts.WatchBuffer, s.opts.WatchBufferBytes) {
			s.forget(w)
			w.drop()
		}
	}
}

// snapshot lists the objects matching f as synthetic Added events.
func snapshot(tx *bolt.Tx, f filter) ([]Event, error) {
	list, _, err := listTx(tx, f)
	if err != nil {
		return nil, err
	}
	evs := make([]Event, len(list))
	for i, e := range list {
		evs[i] = Event{Type: Added, Entry: e}
	}
	return evs, nil
}

// logRange reads the logged events matching f with a revision in (from,
// until], with their previous values where the log has them (PrevCompacted
// where not). It returns ErrGone when one of them lost its value, or when
// the log no longer reaches from.
func logRange(tx *bolt.Tx, f filter, from, until int64) ([]Event, error) {
	evs, _, err := logChunk(tx, f, from, until, math.MaxInt64)
	return evs, err
}

// logChunk is logRange stopping after maxBytes of values; it also returns
// the revision it read up to.
func logChunk(tx *bolt.Tx, f filter, from, until, maxBytes int64) ([]Event, int64, error) {
	var (
		evs  []Event
		size int64
		last = from
	)
	c := tx.Bucket(bucketEvents).Cursor()
	for k, v := c.Seek(encodeRevision(from + 1)); k != nil && size < maxBytes; k, v = c.Next() {
		rev, err := decodeRevision(k)
		if err != nil {
			return nil, 0, fmt.Errorf("event key: %w", err)
		}
		if rev > until {
			break
		}
		if rev != last+1 {
			return nil, 0, fmt.Errorf("watch from %d: event %d was compacted: %w", from, last+1, ErrGone)
		}
		last = rev
		if in, ok := recordIn(v, f); ok && !in {
			continue
		}
		r, err := decodeRecord(k, v, false)
		if err != nil {
			return nil, 0, err
		}
		if r.stripped {
			return nil, 0, fmt.Errorf("watch from %d: event %d lost its value: %w", from, r.rev, ErrGone)
		}
		if r, err = decodeRecord(k, v, true); err != nil {
			return nil, 0, err
		}
		ev := r.event()
		if ev.prevRev > 0 {
			prevFromLog(tx, &ev)
		}
		size += eventBytes(ev)
		evs = append(evs, ev)
	}
	if last < until && size < maxBytes {
		return nil, 0, fmt.Errorf("watch from %d: events after %d were compacted: %w", from, last, ErrGone)
	}
	return evs, last, nil
}
