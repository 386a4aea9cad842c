package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/klauspost/compress/s2"
	bolt "go.etcd.io/bbolt"
)

// On-disk layout (format 3):
//
//	objects: resource \x00 namespace \x00 name -> 8-byte big-endian revision ++ value
//	         (the revision's top bit set: the value is compressed)
//	events:  8-byte big-endian revision        -> encoded event (see encodeRecord)
//	meta:    "revision" -> 8-byte big-endian revision, "format" -> 1 byte
//	next:    revision of a write -> revision of the next event of its key,
//	         while both are in the log
//	prev:    revision of an event -> 0x00 ++ the value its key had before,
//	         or 0x01 ++ that value compressed, kept when the log dropped the
//	         write that made that value
//
// Values are compressed with S2 (klauspost/compress, Snappy's successor:
// no state kept between values) when that saves at least an eighth of
// them: the JSON of a Revision halves (BenchmarkValueCodec: 3,180 bytes
// stored in 48%, 4.6 us to pack, 1.6 us to unpack), bbolt fits two or
// three values in a 4 KiB page instead of one, and the file, most of
// which the kernel maps into knbox, shrinks with them (BenchmarkIdleServer,
// 500 idle Services: the objects' pages 9.1 -> 5.3 MiB, knbox.db resident
// 24 -> 15 MiB; 100: 8.1 -> 2.6 MiB). Format 2 is format 3 with nothing
// compressed: it is read as is; a binary that knows only format 2 refuses
// a format 3 file.
//
// next and prev let a past revision be read (ListPage) as long as the log
// holds every event since: the value a key had then is the value of the
// write its next event names, or, once that write left the log, kept
// under the next event's revision. Stores made before them have neither
// for their older events; those read as lost (ErrGone).
//
// Format 1 kept the previous value in every event as well; opening it drops
// its event log (a watch from before the upgrade gets ErrGone and relists).
var (
	bucketObjects = []byte("objects")
	bucketEvents  = []byte("events")
	bucketMeta    = []byte("meta")
	bucketNext    = []byte("next")
	bucketPrev    = []byte("prev")

	metaRevision = []byte("revision")
	metaFormat   = []byte("format")
)

const formatVersion = 3

var errCorrupt = errors.New("corrupt record")

func (k Key) validate() error {
	if k.Resource == "" || k.Name == "" ||
		strings.IndexByte(k.Resource, 0) >= 0 ||
		strings.IndexByte(k.Namespace, 0) >= 0 ||
		strings.IndexByte(k.Name, 0) >= 0 {
		return fmt.Errorf("%q: %w", k.String(), ErrInvalidKey)
	}
	return nil
}

// objectKey is the bbolt key of k in the objects bucket.
func objectKey(k Key) []byte {
	b := make([]byte, 0, len(k.Resource)+len(k.Namespace)+len(k.Name)+2)
	b = append(b, k.Resource...)
	b = append(b, 0)
	b = append(b, k.Namespace...)
	b = append(b, 0)
	return append(b, k.Name...)
}

// listPrefix is the common prefix of the object keys of resource in
// namespace, or in all namespaces when namespace is "".
func listPrefix(resource, namespace string) []byte {
	b := append([]byte(resource), 0)
	if namespace != "" {
		b = append(b, namespace...)
		b = append(b, 0)
	}
	return b
}

func encodeRevision(rev int64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(rev))
}

// decodeRevision decodes an 8-byte revision; nil decodes to 0.
func decodeRevision(b []byte) (int64, error) {
	if b == nil {
		return 0, nil
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("revision of %d bytes: %w", len(b), errCorrupt)
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// objectCompressed is the bit of an object's stored revision that says its
// value is compressed (revisions are positive int64s: the top bit is free).
const objectCompressed = 1 << 63

func encodeObject(rev int64, value []byte) []byte {
	stored, compressed := packValue(value)
	b := make([]byte, 8, 8+len(stored))
	r := uint64(rev)
	if compressed {
		r |= objectCompressed
	}
	binary.BigEndian.PutUint64(b, r)
	return append(b, stored...)
}

// decodeObject copies a stored object out of bbolt's memory.
func decodeObject(key Key, b []byte) (Entry, error) {
	if len(b) < 8 {
		return Entry{}, fmt.Errorf("object %s: %w", key, errCorrupt)
	}
	r := binary.BigEndian.Uint64(b)
	v, err := unpackValue(b[8:], r&objectCompressed != 0)
	if err != nil {
		return Entry{}, fmt.Errorf("object %s: %w", key, err)
	}
	return Entry{Key: key, Value: v, Revision: int64(r &^ objectCompressed)}, nil
}

// minCompress: shorter values are stored as they are.
const minCompress = 128

// packValue is v as stored: compressed when that saves an eighth of it or
// more, else v itself.
func packValue(v []byte) (stored []byte, compressed bool) {
	if len(v) < minCompress {
		return v, false
	}
	c := s2.Encode(nil, v)
	if len(c) > len(v)-len(v)/8 {
		return v, false
	}
	return c, true
}

// maxUnpacked bounds what a compressed value may claim to decode to
// (bbolt's largest value), so a corrupt one cannot ask for more memory.
// A variable for the fuzz tests.
var maxUnpacked = bolt.MaxValueSize

// unpackValue copies a stored value out of bbolt's memory, decompressed.
func unpackValue(b []byte, compressed bool) ([]byte, error) {
	if !compressed {
		return bytes.Clone(b), nil
	}
	if n, err := s2.DecodedLen(b); err != nil || n > maxUnpacked {
		return nil, fmt.Errorf("compressed value: %w", errCorrupt)
	}
	v, err := s2.Decode(nil, b)
	if err != nil {
		return nil, fmt.Errorf("compressed value: %w", errCorrupt)
	}
	return v, nil
}

// encodePrev is a prev bucket value (see the layout above).
func encodePrev(v []byte) []byte {
	stored, compressed := packValue(v)
	b := make([]byte, 1, 1+len(stored))
	if compressed {
		b[0] = 1
	}
	return append(b, stored...)
}

// decodePrev copies a prev bucket value out of bbolt's memory.
func decodePrev(b []byte) ([]byte, error) {
	if len(b) == 0 || b[0] > 1 {
		return nil, fmt.Errorf("previous value: %w", errCorrupt)
	}
	return unpackValue(b[1:], b[0] == 1)
}

var eventTypeCodes = map[EventType]byte{Added: 'A', Modified: 'M', Deleted: 'D'}

// Flags of an encoded event.
const (
	flagStripped   = 1 // the value is no longer kept (see Options.EventLogBytes)
	flagCompressed = 2 // the value is compressed
)

// record is an event as the log keeps it: the previous value is not there
// (it is the value of the event at prevRev), and a stripped event has no
// value either.
type record struct {
	typ      EventType
	key      Key
	rev      int64
	prevRev  int64 // the key's revision before this event; 0 for Added
	value    []byte
	vlen     int64 // the value's length as stored (compressed or not), also when decodeRecord did not read it
	stripped bool
}

// event is r as an Event without its previous value.
func (r record) event() Event {
	return Event{Type: r.typ, Entry: Entry{Key: r.key, Value: r.value, Revision: r.rev}, prevRev: r.prevRev}
}

// size is what r's value costs in the log: its bytes as stored.
func (r record) size() int64 {
	if r.stripped {
		return 0
	}
	return r.vlen
}

// encodeRecord encodes r (its revision is the bbolt key) as a type byte, a
// flags byte, the uvarint-length-prefixed resource, namespace and name, the
// uvarint previous revision, and, unless stripped, the value as stored
// (packValue) with its length plus one, so 0 keeps a nil slice nil.
func encodeRecord(r record) []byte {
	b, _ := encodeRecordSize(r)
	return b
}

// encodeRecordSize is encodeRecord, and the length of the value as stored.
func encodeRecordSize(r record) ([]byte, int64) {
	k := r.key
	stored, compressed := r.value, false
	if !r.stripped && r.value != nil {
		stored, compressed = packValue(r.value)
	}
	n := 2 + 5*binary.MaxVarintLen64 + len(k.Resource) + len(k.Namespace) + len(k.Name) + len(stored)
	b := make([]byte, 0, n)
	b = append(b, eventTypeCodes[r.typ])
	switch {
	case r.stripped:
		b = append(b, flagStripped)
	case compressed:
		b = append(b, flagCompressed)
	default:
		b = append(b, 0)
	}
	for _, s := range []string{k.Resource, k.Namespace, k.Name} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(r.prevRev))
	if r.stripped {
		return b, 0
	}
	if r.value == nil {
		return binary.AppendUvarint(b, 0), 0
	}
	b = binary.AppendUvarint(b, uint64(len(stored))+1)
	return append(b, stored...), int64(len(stored))
}

// decodeRecord decodes an event stored under revision key k. With value
// false it skips the value (cheap: nothing is copied or decompressed);
// otherwise it copies the value out of b, decompressed.
// recordIn says whether the event record b is of f's resource (and
// namespace) by reading its key in place: a watch resuming from far back
// scans the log past thousands of other resources' records, and decoding
// each one's key allocated three strings. ok is false when b is not a
// record's encoding (decodeRecord says why).
func recordIn(b []byte, f filter) (in, ok bool) {
	if len(b) < 2 {
		return false, false
	}
	b = b[2:]
	var parts [2][]byte // resource, namespace
	for i := range parts {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return false, false
		}
		parts[i], b = b[w:w+int(n)], b[w+int(n):]
	}
	return string(parts[0]) == f.resource && (f.namespace == "" || string(parts[1]) == f.namespace), true
}

func decodeRecord(k, b []byte, value bool) (record, error) {
	rev, err := decodeRevision(k)
	if err != nil {
		return record{}, fmt.Errorf("event key: %w", err)
	}
	fail := func() (record, error) { return record{}, fmt.Errorf("event %d: %w", rev, errCorrupt) }
	if len(b) < 2 {
		return fail()
	}
	r := record{rev: rev}
	switch b[0] {
	case 'A':
		r.typ = Added
	case 'M':
		r.typ = Modified
	case 'D':
		r.typ = Deleted
	default:
		return fail()
	}
	compressed := false
	switch b[1] {
	case 0:
	case flagStripped:
		r.stripped = true
	case flagCompressed:
		compressed = true
	default:
		return fail()
	}
	b = b[2:]
	var strs [3]string
	for i := range strs {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return fail()
		}
		strs[i] = string(b[w : w+int(n)])
		b = b[w+int(n):]
	}
	r.key = Key{Resource: strs[0], Namespace: strs[1], Name: strs[2]}
	prev, w := binary.Uvarint(b)
	if w <= 0 || prev >= uint64(rev) || (prev == 0) != (r.typ == Added) {
		return fail()
	}
	r.prevRev = int64(prev)
	b = b[w:]
	if r.stripped {
		if len(b) != 0 {
			return fail()
		}
		return r, nil
	}
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return fail()
	}
	b = b[w:]
	if n == 0 {
		if len(b) != 0 || compressed {
			return fail()
		}
		return r, nil
	}
	if n-1 != uint64(len(b)) {
		return fail()
	}
	r.vlen = int64(len(b))
	if value {
		if r.value, err = unpackValue(b, compressed); err != nil {
			return fail()
		}
	}
	return r, nil
}
