package store

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/knbox/knbox/pkg/disk"
)

// Mutation is what a MutateFunc returns.
type Mutation struct {
	// Value is the new value to store (create, update), or the object's final
	// state to publish in the Deleted event (delete).
	Value  []byte
	Delete bool
	// Deleting marks an update that is a step of a deletion (marking the
	// object deleted, removing a finalizer or an owner reference): like a
	// Delete, it is accepted while the disk is low (Options.MinFreeBytes)
	// and may use the reserve when the disk is full.
	Deleting bool
	// Noop means nothing changes: no write, no revision used; Mutate returns
	// the current entry.
	Noop bool
}

// MutateFunc gets the current entry (nil if the key is absent) and the
// revision the write will get if it happens, so the caller can embed it in
// the value as metadata.resourceVersion. It runs inside the write transaction:
// it must be quick and must not call the store, and it may run twice (when a
// deletion finds the disk full, it is retried once the reserve is given up).
// An error it returns aborts the write and is returned unchanged from Mutate.
type MutateFunc func(cur *Entry, rev int64) (Mutation, error)

// maxCompactPerWrite bounds the events a write removes from the log. One is
// enough to keep up (each write adds one); more lets the log shrink after
// EventLogSize was lowered.
const maxCompactPerWrite = 8

// Mutate is the one write primitive: create, update and delete are built on
// it, atomically (read, check and write in one bbolt transaction, fsynced
// before Mutate returns). It returns the entry written; for a delete, the
// published final state with the delete's revision. Deleting or no-op on an
// absent key returns ErrNotFound. Writes are serialized; events reach the
// watchers after the commit, in revision order.
//
// A value larger than its limit (Options.MaxValueBytes) fails with a
// *TooLargeError; a write other than a deletion fails with ErrNoSpace while
// the disk is low, and any write does when the disk is full.
func (s *Store) Mutate(key Key, fn MutateFunc) (Entry, error) {
	if err := key.validate(); err != nil {
		return Entry{}, fmt.Errorf("mutate: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return Entry{}, fmt.Errorf("mutate %s: %w", key, ErrClosed)
	}
	w, err := s.write(key, fn)
	if w.deleting && disk.IsNoSpace(err) && s.space.release() {
		// The disk is full and this write frees space: give up the
		// reserve so that it can be committed.
		w, err = s.write(key, fn)
	}
	if w.fnErr != nil {
		return Entry{}, w.fnErr
	}
	if err != nil {
		switch {
		case errors.Is(err, berrors.ErrDatabaseNotOpen):
			err = ErrClosed
		case disk.IsNoSpace(err):
			err = fmt.Errorf("the disk of %s is full: %w", s.space.dir, ErrNoSpace)
		}
		return Entry{}, fmt.Errorf("mutate %s: %w", key, err)
	}
	if w.noop {
		return w.out, nil
	}
	s.rev.Store(w.ev.Entry.Revision)
	s.compacted, s.stripped, s.logBytes = w.compacted, w.stripped, w.logBytes
	ev := w.ev
	ev.Prev = nil // the ring does not keep it
	s.ring.push(ev)
	s.dispatch(w.ev)
	return w.out, nil
}

// written is the outcome of one write transaction.
type written struct {
	out      Entry
	ev       Event
	noop     bool
	deleting bool
	fnErr    error
	// The log's state after the write.
	compacted, stripped, logBytes int64
}

// write runs one write transaction for Mutate.
func (s *Store) write(key Key, fn MutateFunc) (written, error) {
	rev := s.rev.Load() + 1
	w := written{compacted: s.compacted, stripped: s.stripped, logBytes: s.logBytes}
	start := time.Now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		objects := tx.Bucket(bucketObjects)
		okey := objectKey(key)
		var cur *Entry
		if v := objects.Get(okey); v != nil {
			e, err := decodeObject(key, v)
			if err != nil {
				return err
			}
			cur = &e
		}
		var m Mutation
		m, w.fnErr = fn(cur, rev)
		if w.fnErr != nil {
			return w.fnErr
		}
		w.deleting = m.Delete || m.Deleting
		switch {
		case cur == nil && (m.Noop || m.Delete):
			return ErrNotFound
		case m.Noop:
			w.out, w.noop = *cur, true
			return nil
		}
		if !m.Delete {
			if limit := s.valueLimit(key.Resource); int64(len(m.Value)) > limit {
				return &TooLargeError{Resource: key.Resource, Size: int64(len(m.Value)), Limit: limit}
			}
		}
		if !w.deleting {
			if err := s.space.check(); err != nil {
				return err
			}
		}
		if s.opts.Labels != nil {
			if err := s.reindex(tx, key, cur, m); err != nil {
				return err
			}
		}
		var ev Event
		switch {
		case m.Delete:
			if err := objects.Delete(okey); err != nil {
				return fmt.Errorf("delete object: %w", err)
			}
			ev = Event{Type: Deleted, Prev: cur.Value, prevRev: cur.Revision}
		default:
			if err := objects.Put(okey, encodeObject(rev, m.Value)); err != nil {
				return fmt.Errorf("put object: %w", err)
			}
			ev = Event{Type: Added}
			if cur != nil {
				ev = Event{Type: Modified, Prev: cur.Value, prevRev: cur.Revision}
			}
		}
		w.out = Entry{Key: key, Value: m.Value, Revision: rev}
		// Events keep their own copy: the caller may reuse its buffer.
		ev.Entry = Entry{Key: key, Value: bytes.Clone(m.Value), Revision: rev}
		if ev.Prev != nil {
			// Share the previous value with the ring's copy, if it has
			// one, rather than keep two.
			if old, ok := s.ring.at(ev.prevRev); ok && old.Entry.Key == key && bytes.Equal(old.Entry.Value, ev.Prev) {
				ev.Prev = old.Entry.Value
			}
		}
		w.ev = ev
		stored, err := s.appendEvent(tx, ev)
		if err != nil {
			return err
		}
		w.logBytes += stored
		added, err := linkPrev(tx, ev, w.compacted)
		if err != nil {
			return err
		}
		w.logBytes += added
		if w.compacted, w.logBytes, err = s.compact(tx, rev, w.compacted, w.logBytes); err != nil {
			return err
		}
		w.stripped = max(w.stripped, w.compacted)
		w.stripped, w.logBytes, err = s.strip(tx, rev, w.stripped, w.logBytes)
		return err
	})
	if err == nil && !w.noop && s.opts.ObserveCommit != nil {
		s.opts.ObserveCommit(time.Since(start))
	}
	return w, err
}

// valueLimit is the largest value a write of resource may store.
func (s *Store) valueLimit(resource string) int64 {
	if n, ok := s.opts.MaxValueBytesByResource[resource]; ok {
		return n
	}
	return s.opts.MaxValueBytes
}

// appendEvent persists ev and the new revision. It returns the bytes of
// ev's value as stored.
func (s *Store) appendEvent(tx *bolt.Tx, ev Event) (int64, error) {
	events := tx.Bucket(bucketEvents)
	events.FillPercent = 0.9 // keys only grow: pack pages
	rev := encodeRevision(ev.Entry.Revision)
	r := record{typ: ev.Type, key: ev.Entry.Key, rev: ev.Entry.Revision, prevRev: ev.prevRev, value: ev.Entry.Value}
	b, stored := encodeRecordSize(r)
	if err := events.Put(rev, b); err != nil {
		return 0, fmt.Errorf("put event: %w", err)
	}
	if err := tx.Bucket(bucketMeta).Put(metaRevision, rev); err != nil {
		return 0, fmt.Errorf("put revision: %w", err)
	}
	return stored, nil
}

// linkPrev records where the value ev's key had before ev is found: the
// write at ev.prevRev, while the log holds it (next), else ev.Prev itself
// (prev). It returns the bytes of values it added to the log.
func linkPrev(tx *bolt.Tx, ev Event, compacted int64) (int64, error) {
	if ev.prevRev == 0 {
		return 0, nil
	}
	rev := encodeRevision(ev.Entry.Revision)
	if ev.prevRev > compacted {
		if err := tx.Bucket(bucketNext).Put(encodeRevision(ev.prevRev), rev); err != nil {
			return 0, fmt.Errorf("put next: %w", err)
		}
		return 0, nil
	}
	pv := encodePrev(ev.Prev)
	if err := tx.Bucket(bucketPrev).Put(rev, pv); err != nil {
		return 0, fmt.Errorf("put prev: %w", err)
	}
	return int64(len(pv) - 1), nil
}

// compact removes at most maxCompactPerWrite of the oldest events that fall
// outside the last EventLogSize revisions, and returns the new compacted
// revision and the bytes of values the log keeps.
func (s *Store) compact(tx *bolt.Tx, rev, compacted, logBytes int64) (int64, int64, error) {
	limit := rev - int64(s.opts.EventLogSize) // events <= limit go
	c := tx.Bucket(bucketEvents).Cursor()
	for range maxCompactPerWrite {
		k, v := c.First()
		if k == nil {
			break
		}
		r, err := decodeRecord(k, v, false)
		if err != nil {
			return 0, 0, fmt.Errorf("compact: %w", err)
		}
		if r.rev > limit {
			break
		}
		carried, err := carryValue(tx, k, v, r)
		if err != nil {
			return 0, 0, fmt.Errorf("compact: %w", err)
		}
		if err := c.Delete(); err != nil {
			return 0, 0, fmt.Errorf("compact event %d: %w", r.rev, err)
		}
		compacted = r.rev
		logBytes += carried - r.size()
	}
	return compacted, logBytes, nil
}

// carryValue is the part of compacting the event r (stored as k, v) that
// keeps its value for the key's next event, which still needs it (see
// linkPrev), and drops what r itself kept of its key's value before. It
// returns the change in the log's bytes of values, r's own value aside.
func carryValue(tx *bolt.Tx, k, v []byte, r record) (int64, error) {
	next, prev := tx.Bucket(bucketNext), tx.Bucket(bucketPrev)
	var delta int64
	if y := next.Get(k); y != nil {
		y = bytes.Clone(y)
		if !r.stripped {
			full, err := decodeRecord(k, v, true)
			if err != nil {
				return 0, err
			}
			pv := encodePrev(full.value)
			if err := prev.Put(y, pv); err != nil {
				return 0, fmt.Errorf("carry the value of event %d: %w", r.rev, err)
			}
			delta += int64(len(pv) - 1)
		}
		if err := next.Delete(k); err != nil {
			return 0, fmt.Errorf("delete next of %d: %w", r.rev, err)
		}
	}
	if pv := prev.Get(k); pv != nil {
		delta -= int64(len(pv) - 1)
		if err := prev.Delete(k); err != nil {
			return 0, fmt.Errorf("delete prev of %d: %w", r.rev, err)
		}
	}
	return delta, nil
}

// strip drops the values of the oldest events while the log keeps more than
// EventLogBytes of them, never the newest event's (revision rev), and
// returns the new stripped revision and the bytes kept.
func (s *Store) strip(tx *bolt.Tx, rev, stripped, logBytes int64) (int64, int64, error) {
	events := tx.Bucket(bucketEvents)
	for logBytes > s.opts.EventLogBytes && stripped+1 < rev {
		k := encodeRevision(stripped + 1)
		v := events.Get(k)
		if v == nil {
			return 0, 0, fmt.Errorf("strip: event %d missing: %w", stripped+1, errCorrupt)
		}
		r, err := decodeRecord(k, v, false)
		if err != nil {
			return 0, 0, fmt.Errorf("strip: %w", err)
		}
		if pv := tx.Bucket(bucketPrev).Get(k); pv != nil {
			logBytes -= int64(len(pv) - 1)
			if err := tx.Bucket(bucketPrev).Delete(k); err != nil {
				return 0, 0, fmt.Errorf("strip prev of %d: %w", r.rev, err)
			}
		}
		if !r.stripped {
			logBytes -= r.size()
			r.stripped, r.value, r.vlen = true, nil, 0
			// Delete, then Put: a Put alone leaves the short record on
			// the page its value filled (bbolt merges the pages of a
			// leaf only after a deletion), and a log of stripped events
			// would keep one page each. (500 idle Services: 6,000
			// stripped events held 24 MiB of pages, not 1.)
			if err := events.Delete(k); err != nil {
				return 0, 0, fmt.Errorf("strip event %d: %w", r.rev, err)
			}
			if err := events.Put(k, encodeRecord(r)); err != nil {
				return 0, 0, fmt.Errorf("strip event %d: %w", r.rev, err)
			}
		}
		stripped = r.rev
	}
	return stripped, logBytes, nil
}

// Create stores a new object; value gets the revision it will be stored at.
// It returns ErrExists if key is present.
func (s *Store) Create(key Key, value func(rev int64) ([]byte, error)) (Entry, error) {
	return s.Mutate(key, func(cur *Entry, rev int64) (Mutation, error) {
		if cur != nil {
			return Mutation{}, fmt.Errorf("create %s: %w", key, ErrExists)
		}
		v, err := value(rev)
		return Mutation{Value: v}, err
	})
}

// Update replaces an existing object. With expect != 0 the object's current
// revision must equal expect, else ErrConflict. It returns ErrNotFound if key
// is absent.
func (s *Store) Update(key Key, expect int64, value func(rev int64) ([]byte, error)) (Entry, error) {
	return s.Mutate(key, func(cur *Entry, rev int64) (Mutation, error) {
		if err := check(key, cur, expect); err != nil {
			return Mutation{}, fmt.Errorf("update %w", err)
		}
		v, err := value(rev)
		return Mutation{Value: v}, err
	})
}

// Delete removes an object and publishes its last stored value as is in the
// Deleted event. With expect != 0 the object's current revision must equal
// expect, else ErrConflict. It returns ErrNotFound if key is absent.
func (s *Store) Delete(key Key, expect int64) (Entry, error) {
	return s.Mutate(key, func(cur *Entry, _ int64) (Mutation, error) {
		if err := check(key, cur, expect); err != nil {
			return Mutation{}, fmt.Errorf("delete %w", err)
		}
		return Mutation{Value: cur.Value, Delete: true}, nil
	})
}

// check is the precondition of Update and Delete.
func check(key Key, cur *Entry, expect int64) error {
	switch {
	case cur == nil:
		return fmt.Errorf("%s: %w", key, ErrNotFound)
	case expect != 0 && cur.Revision != expect:
		return fmt.Errorf("%s: at revision %d, expected %d: %w", key, cur.Revision, expect, ErrConflict)
	}
	return nil
}
