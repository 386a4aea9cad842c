package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestHistoryOfLargeObjectIsBounded is the finding of the hostile-input
// campaign, scaled down ten times (values and bounds) to keep the test
// quick: 600 updates of a 900 KiB ConfigMap took the memory from 245 MiB to
// 2.4 GiB and the file to 1.2 GiB, for good, since every event kept two
// full copies. Now memory stays within the cache and the file within the
// log's bytes, a resume from a recent revision still works (with previous
// values), one from an old revision is ErrGone, watches of other resources
// still resume from there, and a reopen keeps it so.
func TestHistoryOfLargeObjectIsBounded(t *testing.T) {
	const (
		updates    = 600
		size       = 90 << 10
		cacheBytes = (4 << 20) / 10  // the default then
		logBytes   = (64 << 20) / 10 // the campaign's bound (the default then)
	)
	opts := Options{ReserveBytes: -1, CacheBytes: cacheBytes, EventLogBytes: logBytes}
	s, path := openTest(t, opts)
	cm := Key{Resource: "configmaps", Namespace: "default", Name: "big"}
	other := Key{Resource: svc, Namespace: "default", Name: "small"}
	mustCreate(t, s, keyNs, "first")
	mustCreate(t, s, other, "small")
	start := s.Revision()
	before := heapInUse()
	value := func(i int) []byte { return noise(size, uint64(i)) }
	var revs []int64
	for i := range updates {
		e, err := s.Mutate(cm, func(*Entry, int64) (Mutation, error) { return Mutation{Value: value(i)}, nil })
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		revs = append(revs, e.Revision)
	}
	grown := heapInUse() - before
	// The cache, plus what the last write and the collector keep around.
	if limit := int64(cacheBytes + 8*size); grown > limit {
		t.Errorf("heap grew by %d MiB after %d updates of %d KiB, want at most %d MiB", grown>>20, updates, size>>10, limit>>20)
	}
	// The objects, the log's values and bbolt's copy-on-write slack.
	dbLimit := int64(3 * (logBytes + 2*size))
	if got := fileSize(t, path); got > dbLimit {
		t.Errorf("database is %d MiB, want at most %d MiB", got>>20, dbLimit>>20)
	}
	t.Logf("heap +%d MiB, file %d MiB", grown>>20, fileSize(t, path)>>20)

	check := func(s *Store) {
		t.Helper()
		// A recent resume replays with values and previous values.
		from := revs[len(revs)-3]
		ch, err := s.Watch(t.Context(), "configmaps", "", from, false)
		if err != nil {
			t.Fatalf("watch from a recent revision: %v", err)
		}
		for i := len(revs) - 2; i < len(revs); i++ {
			ev := recv(t, ch)
			if ev.Entry.Revision != revs[i] || !bytes.Equal(ev.Entry.Value, value(i)) || !bytes.Equal(ev.Prev, value(i-1)) {
				t.Fatalf("replayed event %d: rev %d, value %q..., prev %.3q...", i, ev.Entry.Revision, ev.Entry.Value[:3], ev.Prev)
			}
		}
		// An old one: the values are gone.
		if _, err := s.Watch(t.Context(), "configmaps", "", start, false); !errors.Is(err, ErrGone) {
			t.Fatalf("watch of the ConfigMaps from before the updates: %v, want ErrGone", err)
		}
		// Another resource's watch still resumes from there: the events
		// since are kept, without their values, which it does not need.
		ch, err = s.Watch(t.Context(), svc, "", start, false)
		if err != nil {
			t.Fatalf("watch of another resource from before the updates: %v", err)
		}
		e := mustUpdate(t, s, other, "later")
		for ev := recv(t, ch); ev.Entry.Revision != e.Revision; ev = recv(t, ch) {
			if ev.Entry.Key != other || ev.Entry.Revision > e.Revision {
				t.Fatalf("got event %d of %s, want %d", ev.Entry.Revision, ev.Entry.Key, e.Revision)
			}
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, opts)
	check(s)
	if got := fileSize(t, path); got > dbLimit {
		t.Errorf("database is %d MiB after a reopen, want at most %d MiB", got>>20, dbLimit>>20)
	}
}

// TestOpenCompactsFreePages: a file that is mostly free pages is compacted
// at Open, with every object and the revision kept.
func TestOpenCompactsFreePages(t *testing.T) {
	defer func(n int64) { compactMinBytes = n }(compactMinBytes)
	compactMinBytes = 1 << 20
	s, path := openTest(t, Options{ReserveBytes: -1, EventLogBytes: 1 << 20})
	big := noise(128<<10, 1)
	for i := range 40 { // 5 MiB of objects, then deleted
		k := Key{Resource: "configmaps", Namespace: "default", Name: fmt.Sprint(i)}
		if _, err := s.Create(k, func(int64) ([]byte, error) { return big, nil }); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		if i%10 == 0 {
			continue // keep a few
		}
		mustDelete(t, s, Key{Resource: "configmaps", Namespace: "default", Name: fmt.Sprint(i)})
	}
	rev := s.Revision()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := fileSize(t, path)
	s = openAt(t, path, Options{ReserveBytes: -1, EventLogBytes: 1 << 20})
	after := fileSize(t, path)
	if after*2 > before {
		t.Errorf("file of %d MiB became %d MiB at Open, want it compacted", before>>20, after>>20)
	}
	list, got, err := s.List("configmaps", "")
	if err != nil || got != rev || len(list) != 4 || !bytes.Equal(list[0].Value, big) {
		t.Fatalf("after compaction: %d objects at %d, %v; want 4 at %d", len(list), got, err, rev)
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("compaction left %s.compact: %v", path, err)
	}
	mustCreate(t, s, keyA, "after")
}

// TestWatchBufferBytes: a watcher whose pending events hold more than
// WatchBufferBytes is closed, as one that is WatchBuffer events behind.
func TestWatchBufferBytes(t *testing.T) {
	s, _ := openTest(t, Options{WatchBufferBytes: 1000})
	slow, err := s.Watch(t.Context(), svc, "", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		k := Key{Resource: svc, Namespace: "default", Name: fmt.Sprint(i)}
		if _, err := s.Create(k, func(int64) ([]byte, error) { return bytes.Repeat([]byte("v"), 300), nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := awaitClosed(t, slow); n < 1 || n > 4 {
		t.Fatalf("the slow watcher got %d events of 300 bytes before it was closed, want 1 to 4", n)
	}
}

// TestValueLimits: a value over its resource's limit is refused with a
// *TooLargeError; deleting an object larger than a lowered limit works.
func TestValueLimits(t *testing.T) {
	s, path := openTest(t, Options{MaxValueBytes: 100, MaxValueBytesByResource: map[string]int64{"configmaps": 10}})
	cm := Key{Resource: "configmaps", Namespace: "default", Name: "c"}
	for _, tt := range []struct {
		key   Key
		size  int
		limit int64
	}{{keyA, 101, 100}, {cm, 11, 10}} {
		_, err := s.Create(tt.key, func(int64) ([]byte, error) { return make([]byte, tt.size), nil })
		var tl *TooLargeError
		if !errors.As(err, &tl) || !errors.Is(err, ErrTooLarge) || tl.Size != int64(tt.size) || tl.Limit != tt.limit || tl.Resource != tt.key.Resource {
			t.Errorf("create %s of %d bytes: %v", tt.key, tt.size, err)
		}
	}
	mustCreate(t, s, keyA, string(make([]byte, 100)))
	mustCreate(t, s, cm, "0123456789")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, Options{MaxValueBytes: 5})
	if _, err := s.Update(keyA, 0, val("123456")); !errors.Is(err, ErrTooLarge) {
		t.Errorf("update over a lowered limit: %v", err)
	}
	mustDelete(t, s, keyA)
}

func TestOptionsRefused(t *testing.T) {
	for _, o := range []Options{
		{EventLogBytes: -1}, {CacheBytes: -1}, {WatchBufferBytes: -1}, {MaxValueBytes: -1},
		{MaxValueBytesByResource: map[string]int64{"x": 0}},
	} {
		if _, err := Open(t.TempDir()+"/x.db", o); err == nil {
			t.Errorf("Open with %+v accepted", o)
		}
	}
}

// TestLogRange: the log read for other readers than Watch (list
// pagination at an older revision) gives events with their previous values
// where the log keeps them, and ErrGone for an event that lost its value.
func TestLogRange(t *testing.T) {
	s, _ := openTest(t, Options{EventLogBytes: 12, ringSize: 1})
	mustCreate(t, s, keyA, "aaaa") // 1, stripped later
	mustUpdate(t, s, keyA, "bbbb") // 2
	mustUpdate(t, s, keyA, "cccc") // 3
	mustCreate(t, s, keyB, "dddd") // 4
	tx, err := s.db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	evs, err := logRange(tx, filter{resource: svc}, 2, 4)
	if err != nil || len(evs) != 2 || string(evs[0].Prev) != "bbbb" || string(evs[0].Entry.Value) != "cccc" || evs[1].Type != Added {
		t.Fatalf("logRange(2, 4) = %q, %v", detailed(evs), err)
	}
	if _, err := logRange(tx, filter{resource: svc}, 0, 4); !errors.Is(err, ErrGone) {
		t.Fatalf("logRange over a stripped event: %v", err)
	}
}

// TestStrippedEventsShareLeafPages: once the log drops the values of its
// older events, their short records are packed together, not left one
// per page (each ~2 KiB value had filled a page of its own: 500 idle
// Services' 6,000 stripped events held 24 MiB of the file).
func TestStrippedEventsShareLeafPages(t *testing.T) {
	const (
		writes   = 2000
		size     = 2 << 10
		logBytes = 64 << 10
	)
	s, _ := openTest(t, Options{ReserveBytes: -1, EventLogBytes: logBytes})
	value := noise(size, 1)
	for i := range writes {
		k := Key{Resource: "revisions.serving.knative.dev", Namespace: "default", Name: fmt.Sprintf("r-%d", i%300)}
		if _, err := s.Mutate(k, func(*Entry, int64) (Mutation, error) { return Mutation{Value: value}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	var st bolt.BucketStats
	if err := s.db.View(func(tx *bolt.Tx) error {
		st = tx.Bucket(bucketEvents).Stats()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pages := st.LeafPageN + st.LeafOverflowN
	// The values kept (a page each, as before) and the stripped records,
	// some 80 bytes each: ~40 pages.
	if limit := 2*logBytes/size + writes*80/(4<<10)*2; pages > limit {
		t.Errorf("the log of %d events (%d with their value) holds %d leaf pages, want at most %d", st.KeyN, logBytes/size, pages, limit)
	}
	t.Logf("%d events in %d leaf pages", st.KeyN, pages)
}
