package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// pageAll reads the list of svc in ns at rev page by page, limit entries
// a page, as a client follows continue tokens.
func pageAll(t testing.TB, s *Store, ns string, rev int64, limit int) ([]Entry, error) {
	t.Helper()
	var (
		all         []Entry
		startNS, st string
	)
	for range 1000 {
		p, err := s.ListPage(svc, ns, PageOptions{Revision: rev, StartNamespace: startNS, StartName: st, Limit: limit})
		if err != nil {
			return nil, err
		}
		if rev != 0 && p.Revision != rev {
			t.Fatalf("page at %d read at %d", rev, p.Revision)
		}
		rev = p.Revision
		if limit > 0 && len(p.Entries) > limit {
			t.Fatalf("page of %d entries, limit %d", len(p.Entries), limit)
		}
		all = append(all, p.Entries...)
		if !p.More {
			if p.Remaining != 0 {
				t.Fatalf("last page: remaining %d", p.Remaining)
			}
			return all, nil
		}
		if len(p.Entries) == 0 {
			t.Fatal("an empty page with more to come")
		}
		if p.Remaining <= 0 {
			t.Fatalf("more to come, remaining %d", p.Remaining)
		}
		last := p.Entries[len(p.Entries)-1].Key
		startNS, st = last.Namespace, last.Name+"\x00"
	}
	t.Fatal("pages do not end")
	return nil, nil
}

func sameEntries(a, b []Entry) bool {
	return slices.EqualFunc(a, b, func(x, y Entry) bool {
		return x.Key == y.Key && x.Revision == y.Revision && string(x.Value) == string(y.Value)
	})
}

// pageOps runs writes chosen by ops over a few keys and returns the list
// of svc in all namespaces after each revision (index = revision).
func pageOps(t testing.TB, s *Store, ops []byte) [][]Entry {
	t.Helper()
	keys := []Key{{svc, "a", "x"}, {svc, "a", "y"}, {svc, "b", "x"}, {svc, "b", "z"}, {svc, "c", "x"}, {nsRes, "", "a"}}
	snaps := [][]Entry{nil}
	for i, op := range ops {
		k := keys[int(op)%len(keys)]
		var err error
		if _, gerr := s.Get(k); gerr == nil && op/16%3 == 0 {
			_, err = s.Delete(k, 0)
		} else if gerr == nil {
			_, err = s.Update(k, 0, val(fmt.Sprint("u", i)))
		} else {
			_, err = s.Create(k, val(fmt.Sprint("c", i)))
		}
		if err != nil {
			t.Fatal(err)
		}
		list, rev, err := s.List(svc, "")
		if err != nil {
			t.Fatal(err)
		}
		if rev != int64(len(snaps)) {
			t.Fatalf("revision %d after %d writes", rev, len(snaps))
		}
		snaps = append(snaps, list)
	}
	return snaps
}

// checkPages pages through every past revision and compares with the
// snapshot taken then; ErrGone is allowed only for revisions below
// goneBelow.
func checkPages(t testing.TB, s *Store, snaps [][]Entry, goneBelow int64) {
	t.Helper()
	for rev := int64(1); rev < int64(len(snaps)); rev++ {
		for _, limit := range []int{0, 1, 2, 3} {
			got, err := pageAll(t, s, "", rev, limit)
			if errors.Is(err, ErrGone) && rev < goneBelow {
				continue
			}
			if err != nil {
				t.Fatalf("rev %d limit %d: %v", rev, limit, err)
			}
			if !sameEntries(got, snaps[rev]) {
				t.Fatalf("rev %d limit %d: pages %v, the list then was %v", rev, limit, got, snaps[rev])
			}
		}
	}
}

func TestListPageConsistent(t *testing.T) {
	s, _ := openTest(t, Options{})
	ops := []byte{0, 1, 2, 3, 4, 1, 2, 16, 5, 17, 18, 0, 32, 1, 2, 3, 48, 19, 20, 4}
	snaps := pageOps(t, s, ops)
	checkPages(t, s, snaps, 0)

	// One namespace, and the count of what remains.
	p, err := s.ListPage(svc, "b", PageOptions{Revision: 5, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 1 || p.Entries[0].Key != (Key{svc, "b", "x"}) || !p.More || p.Remaining != 1 {
		t.Fatalf("page of b at 5: %+v", p)
	}
	// A selector: Remaining is unknown.
	p, err = s.ListPage(svc, "", PageOptions{Revision: 5, Limit: 1, Match: func(e Entry) (bool, error) { return e.Key.Name == "x", nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 1 || p.Entries[0].Key != (Key{svc, "a", "x"}) || !p.More || p.Remaining != -1 {
		t.Fatalf("matching page at 5: %+v", p)
	}
	if _, err := s.ListPage(svc, "", PageOptions{Revision: s.Revision() + 1}); !errors.Is(err, ErrFuture) {
		t.Fatalf("list at a future revision: %v, want ErrFuture", err)
	}
}

func TestListPageGone(t *testing.T) {
	s, _ := openTest(t, Options{EventLogSize: 4})
	for i := range 3 {
		mustCreate(t, s, Key{svc, "a", fmt.Sprint(i)}, "v")
	}
	p, err := s.ListPage(svc, "", PageOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	rev := p.Revision
	// An object written before rev and changed after it: its value at rev
	// is the log's until the log drops it.
	mustUpdate(t, s, Key{svc, "a", "2"}, "w")
	if got, err := pageAll(t, s, "", rev, 1); err != nil || len(got) != 3 || string(got[2].Value) != "v" {
		t.Fatalf("pages at %d: %v, %v", rev, got, err)
	}
	mustCreate(t, s, Key{svc, "b", "x"}, "v")
	for i := range 4 {
		mustUpdate(t, s, Key{svc, "b", "x"}, fmt.Sprint(i))
	}
	if _, err := s.ListPage(svc, "", PageOptions{Revision: rev, StartNamespace: "a", StartName: "0\x00", Limit: 1}); !errors.Is(err, ErrGone) {
		t.Fatalf("page at a compacted revision: %v, want ErrGone", err)
	}
}

// FuzzListPage checks paged lists at every past revision against the
// lists taken then. With the defaults the log keeps everything: no
// ErrGone. With a small log, a revision whose later events the log still
// holds reads as it was, objects untouched for longer than the log
// included; only older revisions may be gone. With a small log of values
// too (logSize >= 128), any may be gone.
func FuzzListPage(f *testing.F) {
	f.Add(byte(0), []byte{0, 1, 2, 3, 4, 16, 17, 2, 32, 5, 48, 0})
	f.Add(byte(3), []byte{0, 1, 0, 1, 0, 1, 2, 3, 18, 19, 2, 3, 4})
	f.Add(byte(2), []byte{0, 1, 2, 3, 5, 5, 5, 5, 5, 5, 5, 0, 1, 2, 16, 17})
	f.Add(byte(130), []byte{0, 1, 2, 3, 4, 16, 17, 2, 32, 5, 48, 0})
	f.Fuzz(func(t *testing.T, logSize byte, ops []byte) {
		if len(ops) > maxFuzzOps {
			ops = ops[:maxFuzzOps]
		}
		opts := Options{}
		if logSize != 0 {
			opts = Options{EventLogSize: int(logSize%16) + 1, ringSize: 1}
		}
		if logSize >= 128 {
			opts.EventLogBytes = 8
		}
		s, err := Open(filepath.Join(t.TempDir(), "store.db"), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		snaps := pageOps(t, s, ops)
		s.mu.Lock()
		goneBelow := s.compacted
		if logSize >= 128 {
			goneBelow = s.Revision() + 1
		}
		s.mu.Unlock()
		checkPages(t, s, snaps, goneBelow)
		checkLogBytes(t, s)
	})
}

// checkLogBytes: the bytes of values the log counts are those it holds,
// as a reopening counts them.
func checkLogBytes(t testing.TB, s *Store) {
	t.Helper()
	var want int64
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEvents).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			r, err := decodeRecord(k, v, false)
			if err != nil {
				return err
			}
			want += r.size()
		}
		return tx.Bucket(bucketPrev).ForEach(func(k, v []byte) error {
			if tx.Bucket(bucketEvents).Get(k) == nil {
				return fmt.Errorf("prev value kept for event %x, which the log dropped", k)
			}
			want += int64(len(v) - 1)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	got := s.logBytes
	s.mu.Unlock()
	if got != want {
		t.Fatalf("log counts %d bytes of values, holds %d", got, want)
	}
}

// TestListPageOldObjectChanged: an object written long before the log's
// start and changed after the first page still reads as it was, from the
// copy its change keeps; after a reopen too.
func TestListPageOldObjectChanged(t *testing.T) {
	s, path := openTest(t, Options{EventLogSize: 4})
	old := Key{svc, "a", "old"}
	mustCreate(t, s, old, "v1")
	for i := range 10 {
		mustCreate(t, s, Key{svc, "b", fmt.Sprint("n", i)}, "x")
	}
	first, err := s.ListPage(svc, "", PageOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, s, old, "v2")
	mustDelete(t, s, Key{svc, "b", "n9"})
	check := func(s *Store) {
		t.Helper()
		got, err := pageAll(t, s, "", first.Revision, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 11 || got[0].Key != old || string(got[0].Value) != "v1" || got[0].Revision != 1 || got[10].Key.Name != "n9" {
			t.Fatalf("pages at %d: %v", first.Revision, got)
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openAt(t, path, Options{EventLogSize: 4}))
}
