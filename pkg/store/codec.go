package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// On-disk layout (format 2):
//
//	objects: resource \x00 namespace \x00 name -> 8-byte big-endian revision ++ value
//	events:  8-byte big-endian revision        -> encoded event (see encodeRecord)
//	meta:    "revision" -> 8-byte big-endian revision, "format" -> 1 byte
//	next:    revision of a write -> revision of the next event of its key,
//	         while both are in the log
//	prev:    revision of an event -> 0x00 ++ the value its key had before,
//	         kept when the log dropped the write that made that value
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

const formatVersion = 2

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

func encodeObject(rev int64, value []byte) []byte {
	b := make([]byte, 8, 8+len(value))
	binary.BigEndian.PutUint64(b, uint64(rev))
	return append(b, value...)
}

// decodeObject copies a stored object out of bbolt's memory.
func decodeObject(key Key, b []byte) (Entry, error) {
	if len(b) < 8 {
		return Entry{}, fmt.Errorf("object %s: %w", key, errCorrupt)
	}
	return Entry{
		Key:      key,
		Value:    bytes.Clone(b[8:]),
		Revision: int64(binary.BigEndian.Uint64(b)),
	}, nil
}

var eventTypeCodes = map[EventType]byte{Added: 'A', Modified: 'M', Deleted: 'D'}

// Flags of an encoded event.
const flagStripped = 1 // the value is no longer kept (see Options.EventLogBytes)

// record is an event as the log keeps it: the previous value is not there
// (it is the value of the event at prevRev), and a stripped event has no
// value either.
type record struct {
	typ      EventType
	key      Key
	rev      int64
	prevRev  int64 // the key's revision before this event; 0 for Added
	value    []byte
	vlen     int64 // len(value), also when decodeRecord did not read it
	stripped bool
}

// event is r as an Event without its previous value.
func (r record) event() Event {
	return Event{Type: r.typ, Entry: Entry{Key: r.key, Value: r.value, Revision: r.rev}, prevRev: r.prevRev}
}

// size is what r's value costs in the log.
func (r record) size() int64 {
	if r.stripped {
		return 0
	}
	return r.vlen
}

// encodeRecord encodes r (its revision is the bbolt key) as a type byte, a
// flags byte, the uvarint-length-prefixed resource, namespace and name, the
// uvarint previous revision, and, unless stripped, the value with its length
// plus one, so 0 keeps a nil slice nil.
func encodeRecord(r record) []byte {
	k := r.key
	n := 2 + 5*binary.MaxVarintLen64 + len(k.Resource) + len(k.Namespace) + len(k.Name) + len(r.value)
	b := make([]byte, 0, n)
	b = append(b, eventTypeCodes[r.typ])
	if r.stripped {
		b = append(b, flagStripped)
	} else {
		b = append(b, 0)
	}
	for _, s := range []string{k.Resource, k.Namespace, k.Name} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(r.prevRev))
	if r.stripped {
		return b
	}
	if r.value == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(r.value))+1)
	return append(b, r.value...)
}

// decodeRecord decodes an event stored under revision key k. With value
// false it skips the value (cheap: nothing is copied); otherwise it copies
// the value out of b.
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
	switch b[1] {
	case 0:
	case flagStripped:
		r.stripped = true
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
		if len(b) != 0 {
			return fail()
		}
		return r, nil
	}
	if n-1 != uint64(len(b)) {
		return fail()
	}
	r.vlen = int64(len(b))
	if value {
		r.value = bytes.Clone(b)
	}
	return r, nil
}
