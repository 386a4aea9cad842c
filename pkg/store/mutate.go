package store

import (
	"bytes"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Mutation is what a MutateFunc returns.
type Mutation struct {
	// Value is the new value to store (create, update), or the object's final
	// state to publish in the Deleted event (delete).
	Value  []byte
	Delete bool
	// Noop means nothing changes: no write, no revision used; Mutate returns
	// the current entry.
	Noop bool
}

// MutateFunc gets the current entry (nil if the key is absent) and the
// revision the write will get if it happens, so the caller can embed it in
// the value as metadata.resourceVersion. It runs inside the write transaction:
// it must be quick and must not call the store. An error it returns aborts the
// write and is returned unchanged from Mutate.
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
func (s *Store) Mutate(key Key, fn MutateFunc) (Entry, error) {
	if err := key.validate(); err != nil {
		return Entry{}, fmt.Errorf("mutate: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return Entry{}, fmt.Errorf("mutate %s: %w", key, ErrClosed)
	}
	rev := s.rev.Load() + 1
	var (
		out       Entry
		ev        Event
		noop      bool
		fnErr     error
		compacted = s.compacted
	)
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
		m, fnErr = fn(cur, rev)
		if fnErr != nil {
			return fnErr
		}
		switch {
		case cur == nil && (m.Noop || m.Delete):
			return ErrNotFound
		case m.Noop:
			out, noop = *cur, true
			return nil
		case m.Delete:
			if err := objects.Delete(okey); err != nil {
				return fmt.Errorf("delete object: %w", err)
			}
			ev = Event{Type: Deleted, Prev: cur.Value}
		default:
			if err := objects.Put(okey, encodeObject(rev, m.Value)); err != nil {
				return fmt.Errorf("put object: %w", err)
			}
			ev = Event{Type: Added}
			if cur != nil {
				ev = Event{Type: Modified, Prev: cur.Value}
			}
		}
		out = Entry{Key: key, Value: m.Value, Revision: rev}
		// Events keep their own copy: the caller may reuse its buffer.
		ev.Entry = Entry{Key: key, Value: bytes.Clone(m.Value), Revision: rev}
		if err := s.appendEvent(tx, ev); err != nil {
			return err
		}
		var err error
		compacted, err = s.compact(tx, rev, compacted)
		return err
	})
	if fnErr != nil {
		return Entry{}, fnErr
	}
	if err != nil {
		if errors.Is(err, berrors.ErrDatabaseNotOpen) {
			err = ErrClosed
		}
		return Entry{}, fmt.Errorf("mutate %s: %w", key, err)
	}
	if noop {
		return out, nil
	}
	s.rev.Store(rev)
	s.compacted = compacted
	s.ring.push(ev)
	s.dispatch(ev)
	return out, nil
}

// appendEvent persists ev and the new revision.
func (s *Store) appendEvent(tx *bolt.Tx, ev Event) error {
	events := tx.Bucket(bucketEvents)
	events.FillPercent = 0.9 // keys only grow: pack pages
	rev := encodeRevision(ev.Entry.Revision)
	if err := events.Put(rev, encodeEvent(ev)); err != nil {
		return fmt.Errorf("put event: %w", err)
	}
	if err := tx.Bucket(bucketMeta).Put(metaRevision, rev); err != nil {
		return fmt.Errorf("put revision: %w", err)
	}
	return nil
}

// compact removes at most maxCompactPerWrite of the oldest events that fall
// outside the last EventLogSize revisions, and returns the new compacted
// revision.
func (s *Store) compact(tx *bolt.Tx, rev, compacted int64) (int64, error) {
	limit := rev - int64(s.opts.EventLogSize) // events <= limit go
	c := tx.Bucket(bucketEvents).Cursor()
	for range maxCompactPerWrite {
		k, _ := c.First()
		if k == nil {
			break
		}
		r, err := decodeRevision(k)
		if err != nil {
			return 0, fmt.Errorf("compact: %w", err)
		}
		if r > limit {
			break
		}
		if err := c.Delete(); err != nil {
			return 0, fmt.Errorf("compact event %d: %w", r, err)
		}
		compacted = r
	}
	return compacted, nil
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
