package store

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// watcher is one Watch. Its goroutine first sends the backlog (snapshot and
// catch-up events), then forwards live events that dispatch puts in in.
type watcher struct {
	f    filter
	from int64      // only events with a revision > from are delivered
	in   chan Event // live events; closed by dispatch when the watcher falls behind
	out  chan Event
}

// Watch streams the events of resource in namespace ("" = all namespaces)
// with a revision > from.
//
// With from == 0 the watch starts at the current revision and, when initial
// is true, first emits one synthetic Added event per existing object (ordered
// by namespace and name, with its stored revision), then live events, with no
// gap and no duplicate between the two. With from > 0 it first replays the
// retained events after from, or returns ErrGone if some of them were
// compacted away; a from beyond the current revision waits for later events.
// initial only applies to from == 0.
//
// The channel is closed when ctx is done, when the receiver falls more than
// WatchBuffer events behind, or on Close; the caller re-watches from the last
// revision it saw.
func (s *Store) Watch(ctx context.Context, resource, namespace string, from int64, initial bool) (<-chan Event, error) {
	if from < 0 {
		return nil, fmt.Errorf("watch %s from %d: negative revision", resource, from)
	}
	f := filter{resource: resource, namespace: namespace}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, fmt.Errorf("watch %s: %w", resource, ErrClosed)
	}
	cur := s.rev.Load()
	if from == 0 {
		from = cur
	} else {
		initial = false
		if from < s.compacted {
			return nil, fmt.Errorf("watch %s from %d, oldest retained is %d: %w", resource, from, s.compacted+1, ErrGone)
		}
	}

	// Events up to cur come from a snapshot or from the log; later ones from
	// dispatch. A read transaction begun here, while no write is in flight,
	// sees exactly revision cur; the goroutine reads it without holding mu.
	var (
		tx      *bolt.Tx
		backlog []Event
		// Catch-up events older than the ring are read from the log in
		// bbolt: those in (from, dbUntil].
		dbUntil int64
	)
	if !initial && from < cur && from+1 < s.ring.first() {
		dbUntil = s.ring.first() - 1
	}
	if initial || dbUntil > 0 {
		var err error
		if tx, err = s.db.Begin(false); err != nil {
			return nil, fmt.Errorf("watch %s: %w", resource, err)
		}
	}
	if !initial && from < cur {
		backlog = s.ring.since(nil, from, f)
	}

	w := &watcher{
		f:    f,
		from: from,
		in:   make(chan Event, s.opts.WatchBuffer),
		out:  make(chan Event),
	}
	set := s.watchers[resource]
	if set == nil {
		set = make(map[*watcher]struct{})
		s.watchers[resource] = set
	}
	set[w] = struct{}{}
	s.wg.Add(1)
	go s.run(ctx, w, tx, initial, dbUntil, backlog)
	return w.out, nil
}

// run is a watcher's goroutine.
func (s *Store) run(ctx context.Context, w *watcher, tx *bolt.Tx, initial bool, dbUntil int64, backlog []Event) {
	defer s.wg.Done()
	defer close(w.out)
	defer s.unregister(w)

	if tx != nil {
		var (
			head []Event
			err  error
		)
		if initial {
			head, err = snapshot(tx, w.f)
		} else {
			head, err = logRange(tx, w.f, w.from, dbUntil)
		}
		_ = tx.Rollback()
		if err != nil {
			// The file is unreadable; nothing better to do than to end the
			// watch. A re-watch or the next read will surface the error.
			return
		}
		backlog = append(head, backlog...)
	}

	send := func(ev Event) bool {
		select {
		case w.out <- ev:
			return true
		case <-ctx.Done():
		case <-s.done:
		}
		return false
	}
	for _, ev := range backlog {
		if !send(ev) {
			return
		}
	}
	for {
		select {
		case ev, ok := <-w.in:
			if !ok || !send(ev) {
				return
			}
		case <-ctx.Done():
			return
		case <-s.done:
			return
		}
	}
}

func (s *Store) unregister(w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget(w)
}

// forget removes w from the watchers; mu must be held.
func (s *Store) forget(w *watcher) {
	set := s.watchers[w.f.resource]
	delete(set, w)
	if len(set) == 0 {
		delete(s.watchers, w.f.resource)
	}
}

// dispatch hands ev to the watchers of its resource. It is called with mu
// held, in revision order. A watcher whose buffer is full is dropped: its
// goroutine sends what is buffered and closes its channel.
func (s *Store) dispatch(ev Event) {
	for w := range s.watchers[ev.Entry.Key.Resource] {
		if ev.Entry.Revision <= w.from || !w.f.match(ev.Entry.Key) {
			continue
		}
		select {
		case w.in <- ev:
		default:
			s.forget(w)
			close(w.in)
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

// logRange reads the logged events matching f with a revision in (from, until].
func logRange(tx *bolt.Tx, f filter, from, until int64) ([]Event, error) {
	var evs []Event
	c := tx.Bucket(bucketEvents).Cursor()
	for k, v := c.Seek(encodeRevision(from + 1)); k != nil; k, v = c.Next() {
		rev, err := decodeRevision(k)
		if err != nil {
			return nil, err
		}
		if rev > until {
			break
		}
		ev, err := decodeEvent(k, v)
		if err != nil {
			return nil, err
		}
		if f.match(ev.Entry.Key) {
			evs = append(evs, ev)
		}
	}
	return evs, nil
}
