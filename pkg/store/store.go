// Package store is knbox's embedded durable object store.
//
// It owns the durable copy of every API object, the single monotonic
// revision that becomes metadata.resourceVersion, the persisted event log and
// the watches fed from it. Objects live in one bbolt file; every commit is
// fsynced before a write is acknowledged, so an acknowledged write survives
// kill -9, and revisions are never reused, not even after deletes or restarts.
//
// Everything it keeps is bounded: the event log by count (EventLogSize) and
// by the bytes of the values it keeps in full (EventLogBytes; older events
// keep only their key and revision), the in-memory copy of the newest events
// by bytes (CacheBytes), each watcher's backlog by events and bytes, each
// value by size (MaxValueBytes), and the disk it may fill (MinFreeBytes),
// with a reserve file so that a full disk never blocks a delete. The database
// file is compacted at Open when most of it is free pages.
//
// With Options.Labels it keeps a label index (label key=value -> objects)
// in the transaction of each write, so that a list by label reads only the
// objects carrying it (see index.go).
//
// The store must not interpret what it stores: values are opaque bytes (JSON
// in practice) that it never decodes (the labels come from the owner's
// LabelFunc), and it knows nothing of Kubernetes kinds,
// versions, validation or defaulting. A Key's Resource is just a string chosen
// by the caller. Conversions, admission and the mapping of the errors below to
// metav1.Status belong to the apiserver.
package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/knbox/knbox/pkg/disk"
)

// Errors returned by the store, possibly wrapped with context; test them with
// errors.Is.
var (
	ErrNotFound   = errors.New("not found")
	ErrExists     = errors.New("already exists")
	ErrConflict   = errors.New("revision conflict")  // expected revision did not match
	ErrGone       = errors.New("revision compacted") // watch from a revision older than the retained log
	ErrClosed     = errors.New("store closed")
	ErrInvalidKey = errors.New("invalid key")                         // empty Resource or Name, or a NUL byte in a field
	ErrTooLarge   = errors.New("value too large")                     // see TooLargeError
	ErrNoSpace    = errors.New("not enough free space for the store") // see Options.MinFreeBytes
)

// TooLargeError is the error of a write whose value is larger than the limit
// of its resource; errors.Is(err, ErrTooLarge) holds.
type TooLargeError struct {
	Resource    string
	Size, Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: value of %d bytes, the limit is %d: %v", e.Resource, e.Size, e.Limit, ErrTooLarge)
}

// Is makes errors.Is(err, ErrTooLarge) hold.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Key names one object. Resource is chosen by the caller (the apiserver uses
// "plural.group": "services.serving.knative.dev", "namespaces"); the store
// treats it as opaque. Namespace
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
	// Progress is no change: every event of the watch up to
	// Entry.Revision has been sent. Only WatchProgress sends it.
	Progress EventType = "PROGRESS"
)

// Event is one change. The byte slices of an event are shared between all
// watchers that receive it: receivers must not modify them.
type Event struct {
	Type EventType
	// Entry is the new state. For Deleted it is the final state chosen by the
	// deleting MutateFunc, and Revision is the delete's revision.
	Entry Entry
	// Prev is the previous value for Modified and Deleted, nil for Added.
	// An event replayed from the log (a watch from a past revision) whose
	// previous value is no longer kept has a nil Prev and PrevCompacted set.
	Prev          []byte
	PrevCompacted bool

	prevRev int64 // the key's revision before this event; 0 for Added
}

// Options tune a store. The zero value gives the documented defaults.
type Options struct {
	// ObserveCommit, if not nil, is told the duration of each write
	// transaction that committed (the fsync included), for metrics. It
	// runs with the store's write lock held: it must be quick.
	ObserveCommit func(time.Duration)
	// EventLogSize is how many most recent events are kept, persisted in
	// bbolt so a watch can resume from a revision across restarts. Zero means
	// DefaultEventLogSize.
	EventLogSize int
	// EventLogBytes bounds the values the event log keeps, counted as
	// stored (compressed when that helps, see codec.go): the newest
	// events keep theirs, up to this many bytes in all (the newest event
	// always); older ones keep only their type, key and revisions. A watch
	// resuming from a revision gets ErrGone if one of the events it would
	// replay has lost its value; watches of other resources are not
	// affected. Zero means DefaultEventLogBytes.
	EventLogBytes int64
	// CacheBytes bounds the values of the newest events held in memory as
	// well, so that recent resumptions do not read the file. Zero means
	// DefaultCacheBytes: 1 MiB, some 500 writes of Knative objects; a
	// server at rest holds it for nothing, and a resumption from further
	// back reads the log from the file.
	CacheBytes int64
	// WatchBuffer is the most live events a watcher holds for its receiver
	// (in a queue that grows with them); a watcher that falls
	// further behind is closed (the caller re-watches from the last revision
	// it saw). Zero means DefaultWatchBuffer.
	WatchBuffer int
	// WatchBufferBytes closes a watcher whose pending events hold more than
	// this many bytes of values, as WatchBuffer does by count. Zero means
	// DefaultWatchBufferBytes.
	WatchBufferBytes int64
	// MaxValueBytes is the largest value a write may store (the Deleted
	// event of an existing object is never refused). Zero means
	// DefaultMaxValueBytes.
	MaxValueBytes int64
	// MaxValueBytesByResource lowers or raises MaxValueBytes for some
	// resources (Key.Resource).
	MaxValueBytesByResource map[string]int64
	// MinFreeBytes: while the file system of the store has less free space,
	// writes other than deletions (Delete, and Mutations with Deleting set)
	// fail with ErrNoSpace. Zero means DefaultMinFreeBytes; negative turns
	// the check off.
	MinFreeBytes int64
	// ReserveBytes is the size of a file kept beside the database
	// (path + ".reserve") and given up when a deletion finds the disk full,
	// so that deleting objects, which needs a write, always works. It is
	// made again once MinFreeBytes plus its size are free. Zero means
	// DefaultReserveBytes; negative: no reserve.
	ReserveBytes int64
	// Labels, when not nil, keeps a label index of every object, written
	// with the object, so that a list by label (PageOptions.Labels) reads
	// only the objects that carry the label. Open builds the index when
	// missing and drops it when Labels is nil.
	Labels LabelFunc

	// ringSize caps the number of events held in memory; older retained
	// events are read from bbolt. Zero means min(EventLogSize, defaultRingSize).
	// Unexported: tests shrink it to exercise the bbolt path.
	ringSize int
}

// Defaults of Options.
const (
	DefaultEventLogSize = 10000
	// DefaultEventLogBytes: 4 MiB of values as stored are some 4,000
	// writes of Knative objects (2 KiB of JSON each, half that
	// compressed; about twenty per idle Service), far more than a watch
	// that fell behind or a paged list needs to resume. The file holds
	// what the log keeps, and the kernel maps nearly all of it into
	// knbox (every read maps 64 KiB around it): at 64 MiB, 500 idle
	// Services kept 21 MiB of values (32 MiB of pages) in the file and in
	// knbox's RSS.
	DefaultEventLogBytes    = 4 << 20
	DefaultCacheBytes       = 1 << 20
	DefaultWatchBuffer      = 1000
	DefaultWatchBufferBytes = 16 << 20
	// DefaultMaxValueBytes is etcd's default request size limit
	// (--max-request-bytes, 1.5 MiB), which bounds a Kubernetes object.
	DefaultMaxValueBytes = 3 << 19
	DefaultMinFreeBytes  = 256 << 20
	DefaultReserveBytes  = 64 << 20
)

const (
	// defaultRingSize: the ring's slots (an Event each, 136 bytes) are
	// allocated whole; the default CacheBytes holds ~1,000 small values.
	defaultRingSize = 1024
	// lockTimeout bounds the wait for bbolt's file lock, so a second process
	// on the same file fails instead of hanging.
	lockTimeout = 5 * time.Second
)

func (o Options) withDefaults() (Options, error) {
	if o.EventLogSize < 0 || o.WatchBuffer < 0 || o.ringSize < 0 || o.EventLogBytes < 0 ||
		o.CacheBytes < 0 || o.WatchBufferBytes < 0 || o.MaxValueBytes < 0 {
		return o, fmt.Errorf("negative option in %+v", o)
	}
	for r, n := range o.MaxValueBytesByResource {
		if n <= 0 {
			return o, fmt.Errorf("MaxValueBytesByResource[%q]: %d is not positive", r, n)
		}
	}
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	if o.EventLogSize == 0 {
		o.EventLogSize = DefaultEventLogSize
	}
	if o.WatchBuffer == 0 {
		o.WatchBuffer = DefaultWatchBuffer
	}
	def(&o.EventLogBytes, DefaultEventLogBytes)
	def(&o.CacheBytes, DefaultCacheBytes)
	def(&o.WatchBufferBytes, DefaultWatchBufferBytes)
	def(&o.MaxValueBytes, DefaultMaxValueBytes)
	def(&o.MinFreeBytes, DefaultMinFreeBytes)
	def(&o.ReserveBytes, DefaultReserveBytes)
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
	stripped  int64 // events with revision <= stripped have lost their value
	logBytes  int64 // the bytes of the values the log keeps
	ring      ring  // the most recent events
	watchers  map[string]map[*watcher]struct{}
	space     space
	done      chan struct{} // closed by Close
	wg        sync.WaitGroup
}

// Open opens or creates the store at path (mode 0600), creating its buckets,
// and recovers the revision counter and the retained event log. A file that
// is mostly free pages (after many large objects came and went) is compacted
// first, and the reserve file (path + ".reserve") is made if missing.
func Open(path string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s, err := open(path, opts)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if s.worthCompacting() {
		if err := s.db.Close(); err != nil {
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
		if err := compactFile(path); err != nil {
			// The file stays as it was: still correct, only larger.
			slog.Warn("store: compacting the database file failed", "path", path, "err", err)
		}
		if s, err = open(path, opts); err != nil {
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
	}
	s.space.init(path, opts.MinFreeBytes, opts.ReserveBytes)
	return s, nil
}

func open(path string, opts Options) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return nil, err
	}
	s := &Store{
		db:       db,
		opts:     opts,
		ring:     newRing(opts.ringSize, opts.CacheBytes),
		watchers: make(map[string]map[*watcher]struct{}),
		done:     make(chan struct{}),
	}
	if err := s.recover(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// recover creates missing buckets, migrates an older format and loads the
// revision, the state of the event log and its newest events.
func (s *Store) recover() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketObjects, bucketEvents, bucketMeta, bucketNext, bucketPrev} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		switch v := meta.Get(metaFormat); {
		case v == nil:
		case len(v) == 1 && v[0] == 1:
			// Format 1 events carry their previous value: drop the log
			// (its values may be most of the file; Open compacts it).
			if err := tx.DeleteBucket(bucketEvents); err != nil {
				return fmt.Errorf("migrate format 1: %w", err)
			}
			if _, err := tx.CreateBucket(bucketEvents); err != nil {
				return fmt.Errorf("migrate format 1: %w", err)
			}
			for _, b := range [][]byte{bucketNext, bucketPrev} {
				if err := tx.DeleteBucket(b); err != nil {
					return fmt.Errorf("migrate format 1: %w", err)
				}
				if _, err := tx.CreateBucket(b); err != nil {
					return fmt.Errorf("migrate format 1: %w", err)
				}
			}
		case len(v) == 1 && (v[0] == 2 || v[0] == formatVersion):
			// Format 2 is format 3 with no value compressed.
		default:
			return fmt.Errorf("unsupported store format %v", v)
		}
		if err := meta.Put(metaFormat, []byte{formatVersion}); err != nil {
			return fmt.Errorf("write format: %w", err)
		}
		rev, err := decodeRevision(meta.Get(metaRevision))
		if err != nil {
			return fmt.Errorf("read revision: %w", err)
		}
		s.rev.Store(rev)
		if err := s.prepareIndex(tx); err != nil {
			return err
		}
		return s.loadLog(tx, rev)
	})
}

// loadLog reads the state of the event log: where it starts, which events
// lost their values, the bytes of those it keeps, and its newest events
// into the ring.
func (s *Store) loadLog(tx *bolt.Tx, rev int64) error {
	c := tx.Bucket(bucketEvents).Cursor()
	s.ring.next = rev + 1 // until an event is pushed
	first, _ := c.First()
	if first == nil {
		s.compacted, s.stripped = rev, rev
		return nil
	}
	firstRev, err := decodeRevision(first)
	if err != nil {
		return fmt.Errorf("read event key: %w", err)
	}
	s.compacted, s.stripped = firstRev-1, firstRev-1
	var last int64
	for k, v := c.First(); k != nil; k, v = c.Next() {
		r, err := decodeRecord(k, v, false)
		if err != nil {
			return err
		}
		if r.stripped {
			s.stripped = r.rev
		}
		s.logBytes += r.size()
		last = r.rev
	}
	if last != rev {
		return fmt.Errorf("event log ends at revision %d, store is at %d", last, rev)
	}
	if err := tx.Bucket(bucketPrev).ForEach(func(_, v []byte) error {
		s.logBytes += int64(len(v) - 1)
		return nil
	}); err != nil {
		return err
	}
	// The newest events with their values, oldest first.
	var recent []Event
	var size int64
	for k, v := c.Last(); k != nil && len(recent) < s.ring.capacity(); k, v = c.Prev() {
		r, err := decodeRecord(k, v, true)
		if err != nil {
			return err
		}
		if r.stripped || size+int64(len(r.value)) > s.opts.CacheBytes {
			break
		}
		size += int64(len(r.value))
		recent = append(recent, r.event())
	}
	for i := len(recent) - 1; i >= 0; i-- {
		s.ring.push(recent[i])
	}
	return nil
}

// worthCompacting: more than half of a file larger than compactMinBytes
// is unused (free pages, or room bbolt grew the file by), and the disk has
// room for the compacted copy.
func (s *Store) worthCompacting() bool {
	fi, err := os.Stat(s.db.Path())
	if err != nil || fi.Size() < compactMinBytes {
		return false
	}
	var used int64
	if err := s.db.View(func(tx *bolt.Tx) error {
		used = tx.Size()
		return nil
	}); err != nil {
		return false
	}
	st := s.db.Stats()
	used -= int64(st.FreePageN+st.PendingPageN) * int64(s.db.Info().PageSize)
	avail, err := disk.Free(filepath.Dir(s.db.Path()))
	return err == nil && used*2 < fi.Size() && avail > 2*used
}

// compactMinBytes: smaller files are never compacted. A variable for tests.
var compactMinBytes int64 = 16 << 20

// compactFile rewrites the bbolt file at path without its free pages: into
// path + ".compact", synced, then renamed over path. A crash leaves either
// file complete; a leftover ".compact" is removed first.
func compactFile(path string) error {
	tmp := path + ".compact"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("compact: %w", err)
	}
	src, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	defer src.Close()
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	err = bolt.Compact(dst, src, 16<<20)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncFile(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("compact: %w", err)
	}
	return syncFile(filepath.Dir(path))
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
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

// Watchers returns the number of watches open on the store.
func (s *Store) Watchers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, set := range s.watchers {
		n += len(set)
	}
	return n
}

// Revision is the latest committed revision. A new store is at 0 and its
// first write gets 1.
func (s *Store) Revision() int64 { return s.rev.Load() }

// DropCache empties the in-memory cache of recent events (Options.
// CacheBytes), which later writes fill again; until they do, a watch that
// resumes from an earlier revision reads those events from the file. For
// a server at rest, where nothing resumes: the values it held are most of
// what the store keeps in memory.
func (s *Store) DropCache() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring.clear()
}
