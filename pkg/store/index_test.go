package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// testLabels reads the labels of a test value "anything|k=v,k=v".
func testLabels(_ Key, value []byte) (map[string]string, error) {
	_, l, ok := strings.Cut(string(value), "|")
	if !ok {
		return nil, errors.New("no labels")
	}
	m := map[string]string{}
	for _, kv := range strings.Split(l, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// labelPageAll reads the list of svc in ns at rev by label, limit a page.
func labelPageAll(t testing.TB, s *Store, ns string, rev int64, limit int, terms []LabelIn) []Entry {
	t.Helper()
	var (
		all         []Entry
		startNS, st string
	)
	for range 1000 {
		p, err := s.ListPage(svc, ns, PageOptions{Revision: rev, StartNamespace: startNS, StartName: st, Limit: limit, Labels: terms})
		if err != nil {
			t.Fatalf("ListPage at %d by %v: %v", rev, terms, err)
		}
		rev = p.Revision
		if limit > 0 && len(p.Entries) > limit {
			t.Fatalf("page of %d entries, limit %d", len(p.Entries), limit)
		}
		if p.Remaining != -1 {
			t.Fatalf("remaining %d of a list by label", p.Remaining)
		}
		all = append(all, p.Entries...)
		if !p.More {
			return all
		}
		if len(p.Entries) == 0 {
			return all // More counts objects that did not match
		}
		last := p.Entries[len(p.Entries)-1].Key
		startNS, st = last.Namespace, last.Name+"\x00"
	}
	t.Fatal("pages do not end")
	return nil
}

// indexKeys returns the keys of the label index.
func indexKeys(t testing.TB, s *Store) []string {
	t.Helper()
	var keys []string
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLabels)
		if b == nil {
			return errors.New("no label index")
		}
		return b.ForEach(func(k, _ []byte) error { keys = append(keys, string(k)); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestLabelIndex writes random labels to a few objects and checks every
// list by label, at every revision, paged or not, in one namespace or
// all, against the filtered full list; then that the index kept by the
// writes is the one Open builds from the objects.
func TestLabelIndex(t *testing.T) {
	s, path := openTest(t, Options{Labels: testLabels})
	rng := rand.New(rand.NewPCG(1, 2))
	nss := []string{"a", "b"}
	vals := []string{"x", "y", "z"}
	randLabels := func() string {
		var l []string
		for _, k := range []string{"app", "tier", "env"} {
			if rng.IntN(3) > 0 {
				l = append(l, k+"="+vals[rng.IntN(len(vals))])
			}
		}
		return strings.Join(l, ",")
	}
	snaps := map[int64][]Entry{}
	for i := range 150 {
		k := Key{svc, nss[rng.IntN(2)], fmt.Sprintf("s%d", rng.IntN(8))}
		var err error
		v := fmt.Sprintf("v%d|%s", i, randLabels())
		switch rng.IntN(4) {
		case 0:
			_, err = s.Delete(k, 0)
		default:
			_, err = s.Mutate(k, func(*Entry, int64) (Mutation, error) { return Mutation{Value: []byte(v)}, nil })
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		list, rev, err := s.List(svc, "")
		if err != nil {
			t.Fatal(err)
		}
		snaps[rev] = list
	}
	termSets := [][]LabelIn{
		{{Key: "app", Values: []string{"x"}}},
		{{Key: "app", Values: []string{"x", "z"}}},
		{{Key: "app", Values: []string{"y"}}, {Key: "tier", Values: []string{"x", "y"}}},
		{{Key: "env", Values: []string{"nope"}}},
		{{Key: "app", Values: []string{"x", "y", "z"}}, {Key: "tier", Values: []string{"z"}}, {Key: "env", Values: []string{"x"}}},
	}
	for rev, snap := range snaps {
		for _, terms := range termSets {
			for _, ns := range []string{"", "a"} {
				var want []Entry
				for _, e := range snap {
					l, _ := testLabels(e.Key, e.Value)
					if (ns == "" || e.Key.Namespace == ns) && matchTerms(l, terms) {
						want = append(want, e)
					}
				}
				for _, limit := range []int{0, 1, 3} {
					got := labelPageAll(t, s, ns, rev, limit, terms)
					if !sameEntries(got, want) {
						t.Fatalf("rev %d ns %q limit %d %v:\n got %v\nwant %v", rev, ns, limit, terms, got, want)
					}
				}
			}
		}
	}

	kept := indexKeys(t, s)
	if len(kept) == 0 {
		t.Fatal("empty index")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Without a LabelFunc the index goes; with one it is built again.
	s = openAt(t, path, Options{})
	if s.LabelIndexed() {
		t.Fatal("indexed without a LabelFunc")
	}
	if _, err := s.ListPage(svc, "", PageOptions{Labels: termSets[0]}); err == nil {
		t.Fatal("a list by label without an index succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, Options{Labels: testLabels})
	if built := indexKeys(t, s); !slices.Equal(built, kept) {
		t.Fatalf("index built at Open differs from the one kept by writes:\n built %q\n kept %q", built, kept)
	}
}

// TestLabelIndexRefusesUnlabelledValue: a value the LabelFunc cannot read
// is not stored, so the index never misses an object.
func TestLabelIndexRefusesUnlabelledValue(t *testing.T) {
	s, _ := openTest(t, Options{Labels: testLabels})
	if _, err := s.Create(Key{svc, "a", "n"}, val("no labels")); err == nil {
		t.Fatal("created a value without labels")
	}
	if _, err := s.Get(Key{svc, "a", "n"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get: %v", err)
	}
}
