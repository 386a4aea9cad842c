package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// On-disk layout (format 1):
//
//	objects: resource \x00 namespace \x00 name -> 8-byte big-endian revision ++ value
//	events:  8-byte big-endian revision        -> encoded event (see encodeEvent)
//	meta:    "revision" -> 8-byte big-endian revision, "format" -> 1 byte
var (
	bucketObjects = []byte("objects")
	bucketEvents  = []byte("events")
	bucketMeta    = []byte("meta")

	metaRevision = []byte("revision")
	metaFormat   = []byte("format")
)

const formatVersion = 1

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

// encodeEvent encodes ev (its revision is the bbolt key) as a type byte
// followed by uvarint-length-prefixed resource, namespace and name, then value
// and prev with their length plus one, so 0 keeps a nil slice nil.
func encodeEvent(ev Event) []byte {
	k := ev.Entry.Key
	n := 1 + 5*binary.MaxVarintLen64 + len(k.Resource) + len(k.Namespace) + len(k.Name) + len(ev.Entry.Value) + len(ev.Prev)
	b := make([]byte, 0, n)
	b = append(b, eventTypeCodes[ev.Type])
	for _, s := range []string{k.Resource, k.Namespace, k.Name} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, v := range [][]byte{ev.Entry.Value, ev.Prev} {
		if v == nil {
			b = binary.AppendUvarint(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(v))+1)
		b = append(b, v...)
	}
	return b
}

// decodeEvent decodes an event stored under revision key k. It copies
// everything out of b.
func decodeEvent(k, b []byte) (Event, error) {
	rev, err := decodeRevision(k)
	if err != nil {
		return Event{}, fmt.Errorf("event key: %w", err)
	}
	fail := func() (Event, error) { return Event{}, fmt.Errorf("event %d: %w", rev, errCorrupt) }
	if len(b) == 0 {
		return fail()
	}
	var ev Event
	switch b[0] {
	case 'A':
		ev.Type = Added
	case 'M':
		ev.Type = Modified
	case 'D':
		ev.Type = Deleted
	default:
		return fail()
	}
	b = b[1:]
	var strs [3]string
	for i := range strs {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return fail()
		}
		strs[i] = string(b[w : w+int(n)])
		b = b[w+int(n):]
	}
	var vals [2][]byte
	for i := range vals {
		n, w := binary.Uvarint(b)
		if w <= 0 {
			return fail()
		}
		b = b[w:]
		if n == 0 {
			continue
		}
		n--
		if n > uint64(len(b)) {
			return fail()
		}
		vals[i] = bytes.Clone(b[:n])
		b = b[n:]
	}
	if len(b) != 0 {
		return fail()
	}
	ev.Entry = Entry{Key: Key{Resource: strs[0], Namespace: strs[1], Name: strs[2]}, Value: vals[0], Revision: rev}
	ev.Prev = vals[1]
	return ev, nil
}
