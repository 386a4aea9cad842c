package daemon

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// dbDetail says what the store's file holds: its size, the bytes of each
// bucket's pages, the objects by resource (count and mean size) and the
// event log (events, how many keep their value), all as stored
// (compressed values compressed). It reads a copy of
// knbox.db taken at rest (the server holds the file's lock); a copy taken
// while a commit was being written is taken again. With
// KNBOX_IDLE_DB=dir the copy of each step stays there (idle-db-N.db).
func dbDetail(t testing.TB, dataDir string, step int) string {
	dst := filepath.Join(t.TempDir(), "knbox.db")
	if dir := os.Getenv("KNBOX_IDLE_DB"); dir != "" {
		dst = filepath.Join(dir, fmt.Sprintf("idle-db-%d.db", step))
	}
	var last error
	for range 5 {
		if err := copyFile(filepath.Join(dataDir, "knbox.db"), dst); err != nil {
			t.Fatal(err)
		}
		s, err := describeDB(dst)
		if err == nil {
			return s
		}
		last = err
		time.Sleep(time.Second)
	}
	return fmt.Sprintf("knbox.db: no consistent copy: %v", last)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// describeDB summarizes the bbolt file at path (see dbDetail); a copy
// torn by a commit fails its check (bbolt may panic on it: recovered).
func describeDB(path string) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading the copy: %v", r)
		}
	}()
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return "", err
	}
	defer db.Close()
	var b strings.Builder
	err = db.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			return e
		}
		page := int64(db.Info().PageSize)
		fmt.Fprintf(&b, "knbox.db %.1f MiB (free pages %.1f):", float64(fi.Size())/(1<<20), float64(int64(db.Stats().FreePageN)*page)/(1<<20))
		_ = tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
			st := bk.Stats()
			fmt.Fprintf(&b, " %s %.1f", name, float64(int64(st.BranchPageN+st.LeafPageN+st.LeafOverflowN+st.BranchOverflowN)*page)/(1<<20))
			return nil
		})
		type agg struct{ n, bytes int }
		byRes := map[string]*agg{}
		if bk := tx.Bucket([]byte("objects")); bk != nil {
			_ = bk.ForEach(func(k, v []byte) error {
				r := string(k[:max(bytes.IndexByte(k, 0), 0)])
				if byRes[r] == nil {
					byRes[r] = &agg{}
				}
				byRes[r].n++
				byRes[r].bytes += len(v)
				return nil
			})
		}
		names := make([]string, 0, len(byRes))
		for r := range byRes {
			names = append(names, r)
		}
		slices.SortFunc(names, func(x, y string) int { return cmp.Compare(byRes[y].bytes, byRes[x].bytes) })
		b.WriteString("\n      objects:")
		for _, r := range names {
			fmt.Fprintf(&b, " %s %d (%.0f KiB, %d B each)", strings.Split(r, ".")[0], byRes[r].n, float64(byRes[r].bytes)/1024, byRes[r].bytes/byRes[r].n)
		}
		var events, kept, keptBytes int
		byEv := map[string]*agg{}
		if bk := tx.Bucket([]byte("events")); bk != nil {
			_ = bk.ForEach(func(k, v []byte) error {
				events++
				if len(v) < 3 || v[1]&1 != 0 { // flags: stripped (2: compressed)
					return nil
				}
				kept++
				keptBytes += len(v)
				n, w := binary.Uvarint(v[2:])
				if w > 0 && int(n) <= len(v)-2-w {
					r := strings.Split(string(v[2+w:2+w+int(n)]), ".")[0]
					if byEv[r] == nil {
						byEv[r] = &agg{}
					}
					byEv[r].n++
					byEv[r].bytes += len(v)
				}
				return nil
			})
		}
		fmt.Fprintf(&b, "\n      event log: %d events, %d with their value (%.1f MiB as stored):", events, kept, float64(keptBytes)/(1<<20))
		names = names[:0]
		for r := range byEv {
			names = append(names, r)
		}
		slices.SortFunc(names, func(x, y string) int { return cmp.Compare(byEv[y].bytes, byEv[x].bytes) })
		for _, r := range names {
			fmt.Fprintf(&b, " %s %d (%.0f KiB)", r, byEv[r].n, float64(byEv[r].bytes)/1024)
		}
		return nil
	})
	return b.String(), err
}
