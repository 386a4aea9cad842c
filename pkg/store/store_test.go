package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

var (
	svc    = "serving.knative.dev/services"
	nsRes  = "/namespaces"
	keyA   = Key{Resource: svc, Namespace: "default", Name: "a"}
	keyB   = Key{Resource: svc, Namespace: "default", Name: "b"}
	keyNs  = Key{Resource: nsRes, Name: "default"}
	errBad = errors.New("caller's own error")
)

// TestCRUD runs one sequence of operations on one store; each step's
// revision and error are checked.
func TestCRUD(t *testing.T) {
	s, _ := openTest(t, Options{})
	if got := s.Revision(); got != 0 {
		t.Fatalf("new store Revision = %d, want 0", got)
	}
	type op int
	const (
		create op = iota
		update
		del
		get
	)
	steps := []struct {
		name    string
		op      op
		key     Key
		expect  int64
		value   string
		wantRev int64 // revision of the returned entry; 0 if an error is wanted
		wantVal string
		wantErr error
	}{
		{"get absent", get, keyA, 0, "", 0, "", ErrNotFound},
		{"update absent", update, keyA, 0, "x", 0, "", ErrNotFound},
		{"delete absent", del, keyA, 0, "", 0, "", ErrNotFound},
		{"create a", create, keyA, 0, "a1", 1, "a1", nil},
		{"create a again", create, keyA, 0, "a2", 0, "", ErrExists},
		{"get a", get, keyA, 0, "", 1, "a1", nil},
		{"create cluster-scoped", create, keyNs, 0, "ns", 2, "ns", nil},
		{"update a unconditional", update, keyA, 0, "a2", 3, "a2", nil},
		{"update a stale", update, keyA, 1, "a3", 0, "", ErrConflict},
		{"update a current", update, keyA, 3, "a3", 4, "a3", nil},
		{"get a updated", get, keyA, 0, "", 4, "a3", nil},
		{"delete a stale", del, keyA, 3, "", 0, "", ErrConflict},
		{"delete a current", del, keyA, 4, "", 5, "a3", nil},
		{"get a deleted", get, keyA, 0, "", 0, "", ErrNotFound},
		{"recreate a", create, keyA, 0, "a4", 6, "a4", nil},
		{"delete b absent", del, keyB, 0, "", 0, "", ErrNotFound},
		{"get cluster-scoped", get, keyNs, 0, "", 2, "ns", nil},
	}
	for _, st := range steps {
		var (
			e   Entry
			err error
		)
		switch st.op {
		case create:
			e, err = s.Create(st.key, val(st.value))
		case update:
			e, err = s.Update(st.key, st.expect, val(st.value))
		case del:
			e, err = s.Delete(st.key, st.expect)
		case get:
			e, err = s.Get(st.key)
		}
		if st.wantErr != nil {
			if !errors.Is(err, st.wantErr) {
				t.Fatalf("%s: err = %v, want %v", st.name, err, st.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if e.Key != st.key || e.Revision != st.wantRev || string(e.Value) != st.wantVal {
			t.Fatalf("%s: got %+v (value %q), want revision %d value %q", st.name, e, e.Value, st.wantRev, st.wantVal)
		}
	}
	if got := s.Revision(); got != 6 {
		t.Fatalf("Revision = %d, want 6 (failed writes use no revision)", got)
	}
}

func TestCreateEmbedsRevision(t *testing.T) {
	s, _ := openTest(t, Options{})
	mustCreate(t, s, keyB, "b")
	e, err := s.Create(keyA, versioned("a"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "a@2"; string(e.Value) != want || e.Revision != 2 {
		t.Fatalf("got %q at %d, want %q at 2", e.Value, e.Revision, want)
	}
	got, err := s.Get(keyA)
	if err != nil || string(got.Value) != "a@2" {
		t.Fatalf("Get = %q, %v", got.Value, err)
	}
}

func TestMutate(t *testing.T) {
	tests := []struct {
		name    string
		present bool
		fn      MutateFunc
		wantErr error // compared with errors.Is, or == for errBad
		wantRev int64 // revision of the returned entry
		wantVal string
		wantGet string // value stored afterwards; "" = absent
	}{
		{
			name: "noop present", present: true,
			fn:      func(*Entry, int64) (Mutation, error) { return Mutation{Noop: true, Value: []byte("ignored")}, nil },
			wantRev: 1, wantVal: "old", wantGet: "old",
		},
		{
			name:    "noop absent",
			fn:      func(*Entry, int64) (Mutation, error) { return Mutation{Noop: true}, nil },
			wantErr: ErrNotFound,
		},
		{
			name: "caller error unchanged", present: true,
			fn:      func(*Entry, int64) (Mutation, error) { return Mutation{Value: []byte("new")}, errBad },
			wantErr: errBad, wantGet: "old",
		},
		{
			name: "delete publishes final state", present: true,
			fn:      func(*Entry, int64) (Mutation, error) { return Mutation{Delete: true, Value: []byte("final")}, nil },
			wantRev: 2, wantVal: "final",
		},
		{
			name: "sees current entry and next revision", present: true,
			fn: func(cur *Entry, rev int64) (Mutation, error) {
				if cur == nil || string(cur.Value) != "old" || cur.Revision != 1 || rev != 2 {
					return Mutation{}, fmt.Errorf("cur %+v rev %d", cur, rev)
				}
				return Mutation{Value: fmt.Appendf(nil, "new@%d", rev)}, nil
			},
			wantRev: 2, wantVal: "new@2", wantGet: "new@2",
		},
		{
			name: "absent sees nil",
			fn: func(cur *Entry, rev int64) (Mutation, error) {
				if cur != nil || rev != 1 {
					return Mutation{}, fmt.Errorf("cur %+v rev %d", cur, rev)
				}
				return Mutation{Value: []byte("made")}, nil
			},
			wantRev: 1, wantVal: "made", wantGet: "made",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := openTest(t, Options{})
			if tt.present {
				mustCreate(t, s, keyA, "old")
			}
			before := s.Revision()
			e, err := s.Mutate(keyA, tt.fn)
			switch {
			case tt.wantErr == errBad && err != errBad:
				t.Fatalf("err = %v, want the caller's error unchanged", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			case tt.wantErr == nil && err != nil:
				t.Fatal(err)
			}
			if tt.wantErr != nil || tt.wantRev == before {
				if got := s.Revision(); got != before {
					t.Fatalf("Revision = %d after no write, want %d", got, before)
				}
			}
			if tt.wantErr == nil && (e.Revision != tt.wantRev || string(e.Value) != tt.wantVal) {
				t.Fatalf("got %q at %d, want %q at %d", e.Value, e.Revision, tt.wantVal, tt.wantRev)
			}
			got, err := s.Get(keyA)
			switch {
			case tt.wantGet == "" && !errors.Is(err, ErrNotFound):
				t.Fatalf("Get = %q, %v; want not found", got.Value, err)
			case tt.wantGet != "" && (err != nil || string(got.Value) != tt.wantGet):
				t.Fatalf("Get = %q, %v; want %q", got.Value, err, tt.wantGet)
			}
		})
	}
}

func TestList(t *testing.T) {
	s, _ := openTest(t, Options{})
	keys := []Key{
		{svc, "b", "y"}, {svc, "a", "z"}, {svc, "a-b", "a"}, {svc, "b", "x"}, {svc, "a", "a"},
		{"/configmaps", "a", "c"}, {nsRes, "", "b"}, {nsRes, "", "a"},
		{svc + "x", "a", "a"}, // a resource whose name extends svc
	}
	for _, k := range keys {
		mustCreate(t, s, k, k.Namespace+"/"+k.Name)
	}
	mustDelete(t, s, Key{svc, "b", "x"})
	tests := []struct {
		resource, namespace string
		want                []string
	}{
		{svc, "", []string{"a/a", "a/z", "a-b/a", "b/y"}},
		{svc, "a", []string{"a/a", "a/z"}},
		{svc, "b", []string{"b/y"}},
		{svc, "c", nil},
		{nsRes, "", []string{"/a", "/b"}},
		{"/configmaps", "", []string{"a/c"}},
		{"/absent", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.resource+"|"+tt.namespace, func(t *testing.T) {
			list, rev, err := s.List(tt.resource, tt.namespace)
			if err != nil {
				t.Fatal(err)
			}
			if rev != s.Revision() || rev != int64(len(keys)+1) {
				t.Fatalf("list revision = %d, want %d", rev, len(keys)+1)
			}
			var got []string
			for _, e := range list {
				got = append(got, string(e.Value))
				if e.Key.Resource != tt.resource || e.Key.Namespace+"/"+e.Key.Name != string(e.Value) {
					t.Fatalf("entry %+v does not match its value %q", e.Key, e.Value)
				}
				want, _ := s.Get(e.Key)
				if want.Revision != e.Revision {
					t.Fatalf("%s listed at %d, Get says %d", e.Key, e.Revision, want.Revision)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("List = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestInvalidKey(t *testing.T) {
	s, _ := openTest(t, Options{})
	for _, k := range []Key{
		{"", "ns", "n"}, {svc, "ns", ""}, {svc + "\x00", "ns", "n"}, {svc, "n\x00s", "n"}, {svc, "ns", "\x00"},
	} {
		if _, err := s.Create(k, val("x")); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Create %q: err = %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Get(k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Get %q: err = %v, want ErrInvalidKey", k, err)
		}
	}
	if s.Revision() != 0 {
		t.Fatalf("Revision = %d after rejected writes", s.Revision())
	}
}

func TestRevisionsSurviveReopen(t *testing.T) {
	s, path := openTest(t, Options{})
	var want []Entry
	for i := range 10 {
		k := Key{svc, "default", fmt.Sprintf("o%d", i)}
		want = append(want, mustCreate(t, s, k, k.Name))
	}
	// Delete the newest objects so the highest revision belongs to no object:
	// a store that recovered its counter from the objects would reuse it.
	for _, e := range want[7:] {
		mustDelete(t, s, e.Key)
	}
	want = want[:7]
	want[3] = mustUpdate(t, s, want[3].Key, "updated")
	mustDelete(t, s, want[5].Key)
	want = slices.Delete(want, 5, 6)
	last := s.Revision()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, path, Options{})
	if got := s.Revision(); got != last {
		t.Fatalf("reopened Revision = %d, want %d", got, last)
	}
	list, rev, err := s.List(svc, "")
	if err != nil {
		t.Fatal(err)
	}
	if rev != last || len(list) != len(want) {
		t.Fatalf("List after reopen: %d entries at %d, want %d at %d", len(list), rev, len(want), last)
	}
	for i := range want {
		if list[i].Key != want[i].Key || list[i].Revision != want[i].Revision || !bytes.Equal(list[i].Value, want[i].Value) {
			t.Fatalf("entry %d = %+v, want %+v", i, list[i], want[i])
		}
	}
	e := mustCreate(t, s, Key{svc, "default", "o9"}, "again")
	if e.Revision != last+1 {
		t.Fatalf("first write after reopen got %d, want %d", e.Revision, last+1)
	}
}

func TestClosed(t *testing.T) {
	s, _ := openTest(t, Options{})
	mustCreate(t, s, keyA, "a")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Get(keyA); !errors.Is(err, ErrClosed) {
		t.Errorf("Get: %v", err)
	}
	if _, _, err := s.List(svc, ""); !errors.Is(err, ErrClosed) {
		t.Errorf("List: %v", err)
	}
	if _, err := s.Create(keyB, val("b")); !errors.Is(err, ErrClosed) {
		t.Errorf("Create: %v", err)
	}
	if _, err := s.Watch(t.Context(), svc, "", 0, true); !errors.Is(err, ErrClosed) {
		t.Errorf("Watch: %v", err)
	}
}

func TestOpenOptions(t *testing.T) {
	if _, err := Open(t.TempDir()+"/x.db", Options{EventLogSize: -1}); err == nil {
		t.Fatal("negative EventLogSize accepted")
	}
	if _, err := Open(t.TempDir()+"/missing/x.db", Options{}); err == nil {
		t.Fatal("Open in a missing directory succeeded")
	}
}

func TestConcurrentWrites(t *testing.T) {
	s, _ := openTest(t, Options{})
	const workers, each = 4, 10
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range each {
				k := Key{svc, "default", fmt.Sprintf("w%d-%d", w, i)}
				if _, err := s.Create(k, val("v")); err != nil {
					errs <- err
					return
				}
				if _, err := s.Get(k); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	list, rev, err := s.List(svc, "")
	if err != nil || len(list) != workers*each || rev != workers*each {
		t.Fatalf("List = %d entries at %d, %v", len(list), rev, err)
	}
	seen := map[int64]bool{}
	for _, e := range list {
		if seen[e.Revision] {
			t.Fatalf("revision %d used twice", e.Revision)
		}
		seen[e.Revision] = true
	}
}

// TestObserveCommitAndWatchers: each committed write is reported with its
// duration, and open watches are counted, for metrics.
func TestObserveCommitAndWatchers(t *testing.T) {
	var commits []time.Duration
	s, _ := openTest(t, Options{ObserveCommit: func(d time.Duration) { commits = append(commits, d) }})
	mustCreate(t, s, keyA, "a")
	if _, err := s.Create(keyA, val("again")); err == nil {
		t.Fatal("a second Create of the same key succeeded")
	}
	if len(commits) != 1 || commits[0] <= 0 {
		t.Errorf("commits %v, want one of the Create that committed", commits)
	}
	if n := s.Watchers(); n != 0 {
		t.Errorf("Watchers = %d before any watch", n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	if _, err := s.Watch(ctx, keyA.Resource, "", 0, false); err != nil {
		t.Fatal(err)
	}
	if n := s.Watchers(); n != 1 {
		t.Errorf("Watchers = %d with one watch", n)
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for s.Watchers() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := s.Watchers(); n != 0 {
		t.Errorf("Watchers = %d after the watch ended", n)
	}
}
