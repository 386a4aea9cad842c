package store

import (
	"bytes"
	"fmt"
	"os"
	"testing"
)

// benchValue is the size of a small Knative Service in JSON, and
// compresses as little as one (the store compresses values): 2 KiB of
// noise would not compress at all, 2 KiB of one byte to nothing.
var benchValue = append(noise(1024, 1), make([]byte, 1024)...)

func benchKey(i int) Key { return Key{svc, "default", fmt.Sprintf("svc-%06d", i)} }

// fill creates n objects, one fsynced write each, as the apiserver would.
func fill(b *testing.B, s *Store, n int) {
	b.Helper()
	for i := range n {
		if _, err := s.Create(benchKey(i), func(int64) ([]byte, error) { return benchValue, nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreate measures one durable write (one bbolt commit with fsync).
func BenchmarkCreate(b *testing.B) {
	s, _ := openTest(b, Options{})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.Create(benchKey(i), func(int64) ([]byte, error) { return benchValue, nil }); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkGet(b *testing.B) {
	s, _ := openTest(b, Options{})
	fill(b, s, 1000)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.Get(benchKey(i % 1000)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkList1000 lists 1000 objects of one namespace among 2000.
func BenchmarkList1000(b *testing.B) {
	s, _ := openTest(b, Options{})
	fill(b, s, 1000)
	for i := range 1000 {
		k := Key{svc, "other", fmt.Sprint(i)}
		if _, err := s.Create(k, func(int64) ([]byte, error) { return benchValue, nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		list, _, err := s.List(svc, "default")
		if err != nil || len(list) != 1000 {
			b.Fatalf("List: %d entries, %v", len(list), err)
		}
	}
}

// BenchmarkWatchDelivery measures a write and its delivery to 10 watchers.
func BenchmarkWatchDelivery(b *testing.B) {
	s, _ := openTest(b, Options{})
	var chans []<-chan Event
	for range 10 {
		ch, err := s.Watch(b.Context(), svc, "", 0, false)
		if err != nil {
			b.Fatal(err)
		}
		chans = append(chans, ch)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.Create(benchKey(i), func(int64) ([]byte, error) { return benchValue, nil }); err != nil {
			b.Fatal(err)
		}
		for _, ch := range chans {
			<-ch
		}
		i++
	}
}

// BenchmarkListPage reads 1000 objects in pages of 100: at the latest
// revision, and at a revision 1000 writes (to half of them) ago, which
// reads the changed objects' old values from the log.
func BenchmarkListPage(b *testing.B) {
	for _, past := range []bool{false, true} {
		b.Run(fmt.Sprintf("past=%v", past), func(b *testing.B) {
			s, _ := openTest(b, Options{})
			fill(b, s, 1000)
			rev := s.Revision()
			if past {
				for i := range 1000 {
					if _, err := s.Update(benchKey(i%500), 0, func(int64) ([]byte, error) { return benchValue, nil }); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				rev = 0
			}
			b.ReportAllocs()
			for b.Loop() {
				n, start := 0, ""
				for {
					p, err := s.ListPage(svc, "default", PageOptions{Revision: rev, StartName: start, Limit: 100})
					if err != nil {
						b.Fatal(err)
					}
					n += len(p.Entries)
					if !p.More {
						break
					}
					start = p.Entries[len(p.Entries)-1].Key.Name + "\x00"
				}
				if n != 1000 {
					b.Fatalf("%d entries", n)
				}
			}
		})
	}
}

// BenchmarkListPageByLabel lists the 5 objects labelled team=a among 500:
// by reading every object and checking its labels (as lists by label did
// before the index), and through the label index.
func BenchmarkListPageByLabel(b *testing.B) {
	terms := []LabelIn{{Key: "team", Values: []string{"a"}}}
	for _, indexed := range []bool{false, true} {
		b.Run(fmt.Sprintf("index=%v", indexed), func(b *testing.B) {
			s, _ := openTest(b, Options{Labels: testLabels})
			for i := range 500 {
				team := "b"
				if i%100 == 0 {
					team = "a"
				}
				v := append(bytes.Clone(benchValue), "|team="+team...)
				if _, err := s.Create(benchKey(i), func(int64) ([]byte, error) { return v, nil }); err != nil {
					b.Fatal(err)
				}
			}
			opts := PageOptions{Labels: terms}
			if !indexed {
				opts = PageOptions{Match: func(e Entry) (bool, error) {
					l, err := testLabels(e.Key, e.Value)
					return err == nil && matchTerms(l, terms), err
				}}
			}
			b.ReportAllocs()
			for b.Loop() {
				p, err := s.ListPage(svc, "default", opts)
				if err != nil || len(p.Entries) != 5 {
					b.Fatalf("%v, %d entries", err, len(p.Entries))
				}
			}
		})
	}
}

// BenchmarkValueCodec: what storing a Revision (testdata/revision.json,
// written by knbox for BenchmarkIdleServer) compressed costs, per write
// (pack) and per read (unpack), and the bytes it saves.
func BenchmarkValueCodec(b *testing.B) {
	v, err := os.ReadFile("testdata/revision.json")
	if err != nil {
		b.Fatal(err)
	}
	stored, compressed := packValue(v)
	if !compressed {
		b.Fatal("a Revision is stored as it is")
	}
	b.Run("pack", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(v)))
		for b.Loop() {
			packValue(v)
		}
		b.ReportMetric(float64(len(stored))/float64(len(v)), "stored/raw")
	})
	b.Run("unpack", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(v)))
		for b.Loop() {
			if _, err := unpackValue(stored, true); err != nil {
				b.Fatal(err)
			}
		}
	})
}
