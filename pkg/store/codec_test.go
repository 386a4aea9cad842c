package store

import (
	"bytes"
	"errors"
	"testing"
)

func sameRecord(a, b record) bool {
	return a.typ == b.typ && a.key == b.key && a.rev == b.rev && a.prevRev == b.prevRev && a.stripped == b.stripped &&
		bytes.Equal(a.value, b.value) && (a.value == nil) == (b.value == nil)
}

func TestRecordCodec(t *testing.T) {
	tests := []record{
		{typ: Added, key: Key{svc, "default", "a"}, value: []byte(`{"a":1}`), rev: 1},
		{typ: Modified, key: Key{svc, "ns", "b"}, value: []byte("new"), rev: 1 << 40, prevRev: 1<<40 - 1},
		{typ: Deleted, key: Key{nsRes, "", "c"}, value: nil, rev: 7, prevRev: 3},
		{typ: Modified, key: Key{svc, "", "d"}, value: []byte{}, rev: 8, prevRev: 2},
		{typ: Modified, key: Key{svc, "", "e"}, rev: 9, prevRev: 2, stripped: true},
		{typ: Added, key: Key{svc, "", "f"}, rev: 10, stripped: true},
	}
	for _, want := range tests {
		t.Run(string(want.typ)+"/"+want.key.Name, func(t *testing.T) {
			want.vlen = int64(len(want.value))
			b := encodeRecord(want)
			got, err := decodeRecord(encodeRevision(want.rev), b, true)
			if err != nil {
				t.Fatal(err)
			}
			if !sameRecord(got, want) || got.vlen != want.vlen {
				t.Fatalf("round trip: got %+v, want %+v", got, want)
			}
			head, err := decodeRecord(encodeRevision(want.rev), b, false)
			if err != nil || head.value != nil || head.size() != want.size() || head.stripped != want.stripped {
				t.Fatalf("without the value: %+v, %v", head, err)
			}
			// Every truncation is rejected, never a panic.
			for i := range len(b) {
				if _, err := decodeRecord(encodeRevision(want.rev), b[:i], true); !errors.Is(err, errCorrupt) {
					t.Fatalf("truncated to %d bytes: err = %v", i, err)
				}
			}
		})
	}
}

// FuzzDecodeRecord feeds arbitrary bytes to the event decoder: it must
// return an error or a record that encodes back to the same record.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(record{typ: Added, key: Key{svc, "default", "a"}, value: []byte("v")}))
	f.Add(encodeRecord(record{typ: Deleted, key: Key{nsRes, "", "n"}, prevRev: 2}))
	f.Add(encodeRecord(record{typ: Modified, key: Key{nsRes, "", "n"}, prevRev: 1, stripped: true}))
	f.Add([]byte{'M', 0, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		k := encodeRevision(3)
		r, err := decodeRecord(k, b, true)
		if err != nil {
			return
		}
		head, err := decodeRecord(k, b, false)
		if err != nil || head.size() != r.size() {
			t.Fatalf("decoding without the value: %+v, %v; with it: %+v", head, err, r)
		}
		// Uvarints have redundant encodings; compare decoded forms.
		r2, err := decodeRecord(k, encodeRecord(r), true)
		if err != nil || !sameRecord(r, r2) {
			t.Fatalf("re-encoding %q gives %+v, %v; want %+v", b, r2, err, r)
		}
	})
}
