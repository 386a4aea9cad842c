package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/knbox/knbox/pkg/disk/disktest"
)

// TestFullDiskStillDeletes: with the data dir's file system full, creates
// and updates fail with ErrNoSpace (and Check says so), but deletions, and
// updates that are steps of one, go through, with the reserve given up if
// need be; once space is freed, writes work again and the reserve is back.
// Before the reserve, deleting could not free space: it needed a write.
func TestFullDiskStillDeletes(t *testing.T) {
	dir := disktest.SmallFS(t, 24<<20)
	path := filepath.Join(dir, "store.db")
	s := openAt(t, path, Options{MinFreeBytes: 1 << 20, ReserveBytes: 4 << 20})
	if _, err := os.Stat(path + ".reserve"); err != nil {
		t.Fatalf("no reserve file: %v", err)
	}
	value := strings.Repeat("x", 16<<10)
	var keys []Key
	for i := range 100 {
		k := Key{Resource: svc, Namespace: "default", Name: fmt.Sprint(i)}
		mustCreate(t, s, k, value)
		keys = append(keys, k)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check with room: %v", err)
	}
	free := disktest.Fill(t, dir)

	if err := s.Check(); !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "minFreeBytes") {
		t.Errorf("Check on a full disk: %v", err)
	}
	if _, err := s.Create(keyA, val(value)); !errors.Is(err, ErrNoSpace) {
		t.Errorf("create on a full disk: %v, want ErrNoSpace", err)
	}
	if _, err := s.Update(keys[0], 0, val(value+"y")); !errors.Is(err, ErrNoSpace) {
		t.Errorf("update on a full disk: %v, want ErrNoSpace", err)
	}
	// A step of a deletion (a finalizer removed, say), then the deletes.
	if _, err := s.Mutate(keys[0], func(cur *Entry, _ int64) (Mutation, error) {
		return Mutation{Value: append(cur.Value, 'z'), Deleting: true}, nil
	}); err != nil {
		t.Fatalf("deleting update on a full disk: %v", err)
	}
	for _, k := range keys {
		mustDelete(t, s, k)
	}
	if _, err := os.Stat(path + ".reserve"); err == nil {
		t.Log("the deletes did not need the reserve")
	}

	free()
	if err := s.Check(); err != nil {
		t.Errorf("Check after freeing space: %v", err)
	}
	mustCreate(t, s, keyA, value)
	if fi, err := os.Stat(path + ".reserve"); err != nil || fi.Size() != 4<<20 {
		t.Errorf("reserve after freeing space: %v, %v", fi, err)
	}
}
