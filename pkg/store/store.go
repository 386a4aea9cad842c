// Package store is knbox's embedded durable object store.
//
// It owns the durable copy of every API object, the single monotonic
// revision that becomes metadata.resourceVersion, the persisted event log and
// the watches fed from it. Objects live in one bbolt file; every commit is
// fsynced before a write is acknowledged, so an acknowledged write survives
// kill -9, and revisions are never reused, not even after deletes or restarts.
//
// The store must not interpret what it stores: values are opaque bytes (JSON
// in practice) that it never decodes, and it knows nothing of Kubernetes kinds,
// versions, validation or defaulting. A Key's Resource is just a string chosen
// by the caller. Conversions, admission and the mapping of the errors below to
// metav1.Status belong to the apiserver.
package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Errors returned by the store, possibly wrapped with context; test them with
// errors.Is.
var (
	ErrNotFound   = errors.New("not found")
	ErrExists     = errors.New("already exists")
	ErrConflict   = errors.New("revision conflict")  // expected revision did not match
	ErrGone       = errors.New("revision compacted") // watch from a revision older than the retained log
	ErrClosed     = errors.New("store closed")
	ErrInvalidKey = errors.New("invalid key") // empty Resource or Name, or a NUL byte in a field
)

// Key names one object. Resource is "group/plural" ("serving.knative.dev/services",
// "/namespaces" for the core group); the store treats it as opaque. Namespace
// is "" for cluster-scoped objects. No field may contain the byte 0.
type Key struct{ Resource, Namespace, Name string }

// String returns resource/namespace/name, for messages.
func (k Key) String() string { return k.Resource + "/" + k.Namespace + "/" + k.Name }

// Entry is one stored object.
type Entry struct {
	Key      Key
	Value    []byte
	Revision int64 // revision of the write that produced Value
}

// EventType says what happened to an object.
type EventType string

// Event types, spelled as on the Kubernetes watch wire.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
)

// Event is one change. The byte slices of an event are shared between all
// watchers that receive it: receivers must not modify them.
type Event struct {
	Type EventType
	// Entry is the new state. For Deleted it is the final state chosen by the
	// deleting MutateFunc, and Revision is the delete's revision.
	Entry Entry
	// Prev is the previous value for Modified and Deleted, nil for Added.
	Prev []byte
}

// Options tune a store. The zero value gives the documented defaults.
type Options struct {
	// EventLogSize is how many most recent events are kept, persisted in
	// bbolt so a watch can resume from a revision across restarts. Zero means
	// 10000.
	EventLogSize int
	// WatchBuffer is the channel buffer per watcher; a watcher that falls
	// further behind is closed (the caller re-watches from the last revision
	// it saw). Zero means 1000.
	WatchBuffer int

	// ringSize caps the in-memory copy of the event log; older retained
	// events are read from bbolt. Zero means min(EventLogSize, defaultRingSize).
	// Unexported: tests shrink it to exercise the bbolt path.
	ringSize int
}

const (
	defaultEventLogSize = 10000
	defaultWatchBuffer  = 1000
	defaultRingSize     = 4096
	// lockTimeout bounds the wait for bbolt's file lock, so a second process
	// on the same file fails instead of hanging.
	lockTimeout = 5 * time.Second
)

func (o Options) withDefaults() (Options, error) {
	if o.EventLogSize < 0 || o.WatchBuffer < 0 || o.ringSize < 0 {
		return o, fmt.Errorf("negative option in %+v", o)
	}
	if o.EventLogSize == 0 {
		o.EventLogSize = defaultEventLogSize
	}
	if o.WatchBuffer == 0 {
		o.WatchBuffer = defaultWatchBuffer
	}
	if o.ringSize == 0 {
		o.ringSize = min(o.EventLogSize, defaultRingSize)
	}
	o.ringSize = min(o.ringSize, o.EventLogSize)
	return o, nil
}

// Store is the durable object store. All methods are safe for concurrent use.
type Store struct {
	db   *bolt.DB
	opts Options

	rev    atomic.Int64 // latest committed revision, read without mu
	closed atomic.Bool

	// mu serializes writes and orders event delivery: it is held across the
	// bbolt commit and the dispatch of its event, and by Watch while it
	// registers, so a watcher sees every revision exactly once.
	mu        sync.Mutex
	compacted int64 // events with revision <= compacted are no longer retained
	ring      ring  // the most recent events
	watchers  map[string]map[*watcher]struct{}
	done      chan struct{} // closed by Close
	wg        sync.WaitGroup
}

// Open opens or creates the store at path (mode 0600), creating its buckets,
// and recovers the revision counter and the retained event log.
func Open(path string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &Store{
		db:       db,
		opts:     opts,
		ring:     newRing(opts.ringSize),
		watchers: make(map[string]map[*watcher]struct{}),
		done:     make(chan struct{}),
	}
	if err := s.recover(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return s, nil
}

// recover creates missing buckets and loads the revision and recent events.
func (s *Store) recover() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketObjects, bucketEvents, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		switch v := meta.Get(metaFormat); {
		case v == nil:
			if err := meta.Put(metaFormat, []byte{formatVersion}); err != nil {
				return fmt.Errorf("write format: %w", err)
			}
		case len(v) != 1 || v[0] != formatVersion:
			return fmt.Errorf("unsupported store format %v", v)
		}
		rev, err := decodeRevision(meta.Get(metaRevision))
		if err != nil {
			return fmt.Errorf("read revision: %w", err)
		}
		s.rev.Store(rev)

		c := tx.Bucket(bucketEvents).Cursor()
		first, _ := c.First()
		if first == nil {
			s.compacted = rev
			return nil
		}
		firstRev, err := decodeRevision(first)
		if err != nil {
			return fmt.Errorf("read event key: %w", err)
		}
		s.compacted = firstRev - 1
		// Load the newest events into the ring, oldest first.
		var recent []Event
		for k, v := c.Last(); k != nil && len(recent) < s.ring.capacity(); k, v = c.Prev() {
			ev, err := decodeEvent(k, v)
			if err != nil {
				return err
			}
			recent = append(recent, ev)
		}
		for i := len(recent) - 1; i >= 0; i-- {
			s.ring.push(recent[i])
		}
		if n := len(recent); n > 0 && recent[0].Entry.Revision != rev {
			return fmt.Errorf("event log ends at revision %d, store is at %d", recent[0].Entry.Revision, rev)
		}
		return nil
	})
}

// Close closes the store and every watch channel. It waits for the watchers'
// goroutines to end. Calling it again does nothing.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil
	}
	s.closed.Store(true)
	close(s.done)
	s.mu.Unlock()
	s.wg.Wait()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// Revision is the latest committed revision. A new store is at 0 and its
// first write gets 1.
func (s *Store) Revision() int64 { return s.rev.Load() }
