package store

import (
	"bytes"
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"
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
	f.Add(encodeRecord(record{typ: Added, key: Key{svc, "default", "a"}, value: bytes.Repeat([]byte(`{"a":"b"}`), 40)}))
	defer func(n int) { maxUnpacked = n }(maxUnpacked)
	maxUnpacked = 1 << 20 // a corrupt length claims no more memory than this
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
		// Reading the key in place agrees with decoding it.
		for _, f := range []filter{{r.key.Resource, ""}, {r.key.Resource, r.key.Namespace}, {r.key.Resource, r.key.Namespace + "x"}, {r.key.Resource + "x", ""}} {
			if in, ok := recordIn(b, f); !ok || in != f.match(r.key) {
				t.Fatalf("recordIn(%q, %+v) = %v, %v; the key is %+v", b, f, in, ok, r.key)
			}
		}
		// Uvarints have redundant encodings; compare decoded forms.
		r2, err := decodeRecord(k, encodeRecord(r), true)
		if err != nil || !sameRecord(r, r2) {
			t.Fatalf("re-encoding %q gives %+v, %v; want %+v", b, r2, err, r)
		}
	})
}

// TestCompressedValues: values that compress are stored compressed (objects,
// events and the prev bucket alike) and read back as they were; short or
// incompressible ones are stored as they are; a corrupt compressed value
// is an error, never a panic.
func TestCompressedValues(t *testing.T) {
	json := bytes.Repeat([]byte(`{"apiVersion":"serving.knative.dev/v1","kind":"Revision","metadata":{"name":"hello-00001"}}`), 20)
	for _, v := range [][]byte{json, noise(4096, 7), []byte(`{"a":1}`), {}} {
		stored, compressed := packValue(v)
		if compressed != (len(v) == len(json)) {
			t.Errorf("%d bytes: compressed %v", len(v), compressed)
		}
		obj := encodeObject(42, v)
		e, err := decodeObject(Key{svc, "ns", "n"}, obj)
		if err != nil || e.Revision != 42 || !bytes.Equal(e.Value, v) {
			t.Fatalf("object of %d bytes: %d, %v", len(v), e.Revision, err)
		}
		b, size := encodeRecordSize(record{typ: Added, key: Key{svc, "ns", "n"}, rev: 5, value: v})
		r, err := decodeRecord(encodeRevision(5), b, true)
		if err != nil || !bytes.Equal(r.value, v) || r.vlen != int64(len(stored)) || size != r.vlen {
			t.Fatalf("event of %d bytes: %+v (size %d), %v", len(v), r, size, err)
		}
		p, err := decodePrev(encodePrev(v))
		if err != nil || !bytes.Equal(p, v) {
			t.Fatalf("prev of %d bytes: %v", len(v), err)
		}
		if compressed {
			bad := bytes.Clone(obj)
			bad[len(bad)-1] ^= 0xff
			bad = bad[:len(bad)-3]
			if _, err := decodeObject(Key{svc, "ns", "n"}, bad); !errors.Is(err, errCorrupt) {
				t.Errorf("corrupt compressed object: %v", err)
			}
		}
	}
}

// TestReadsFormat2: a file of format 2 (nothing compressed) is read as it
// is, and written on in format 3.
func TestReadsFormat2(t *testing.T) {
	s, path := openTest(t, Options{ReserveBytes: -1})
	big := bytes.Repeat([]byte(`{"kind":"ConfigMap","data":{"k":"v"}}`), 100)
	k := Key{Resource: "configmaps", Namespace: "default", Name: "old"}
	mustCreate(t, s, k, "x")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// As format 2 wrote it: the value as it is after the revision.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMeta).Put(metaFormat, []byte{2}); err != nil {
			return err
		}
		return tx.Bucket(bucketObjects).Put(objectKey(k), append(encodeRevision(1), big...))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, Options{ReserveBytes: -1})
	e, err := s.Get(k)
	if err != nil || !bytes.Equal(e.Value, big) || e.Revision != 1 {
		t.Fatalf("object of format 2: %v, %v", e, err)
	}
	mustUpdate(t, s, k, string(big)+" ")
	if err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(metaFormat); !bytes.Equal(v, []byte{formatVersion}) {
			t.Errorf("format %v after open, want %d", v, formatVersion)
		}
		if v := tx.Bucket(bucketObjects).Get(objectKey(k)); len(v) >= len(big) {
			t.Errorf("a new write of %d bytes stored in %d", len(big), len(v))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
