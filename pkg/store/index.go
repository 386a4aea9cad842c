package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// LabelFunc returns the labels of a value, for the label index. The store
// does not know what a value holds; its owner does (the apiserver reads
// metadata.labels). It runs inside write transactions: it must be quick,
// must not call the store, and must give the same labels for the same bytes.
// An error it returns fails the write of that value.
type LabelFunc func(key Key, value []byte) (map[string]string, error)

// LabelIn selects the objects whose label Key has one of Values (the
// selector terms `key=value` and `key in (v1,v2)`).
type LabelIn struct {
	Key    string
	Values []string
}

// The label index (bucket "labels", present only while Options.Labels is
// set): one empty value under
//
//	resource \x00 uvarint(len(key)) key uvarint(len(value)) value namespace \x00 name
//
// for every label of every object, written in the transaction that writes
// the object. Its keys sort like the objects' within one label key=value, so
// a list walks them in list order. Open builds it when it is missing and
// drops it when Options.Labels is nil, so that a store once used without
// the index never serves a stale one.
var bucketLabels = []byte("labels")

// termPrefix is the prefix of the index keys of resource with label
// key=value, in namespace ("" = all).
func termPrefix(resource, key, value, namespace string) []byte {
	b := make([]byte, 0, len(resource)+len(key)+len(value)+len(namespace)+2+2*binary.MaxVarintLen64)
	b = append(b, resource...)
	b = append(b, 0)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	b = append(b, value...)
	if namespace != "" {
		b = append(b, namespace...)
		b = append(b, 0)
	}
	return b
}

// indexKey is the index key of object k's label key=value.
func indexKey(k Key, key, value string) []byte {
	b := termPrefix(k.Resource, key, value, "")
	b = append(b, k.Namespace...)
	b = append(b, 0)
	return append(b, k.Name...)
}

// reindex updates the index for the write m of key, whose current entry is
// cur (nil: absent).
func (s *Store) reindex(tx *bolt.Tx, key Key, cur *Entry, m Mutation) error {
	var before, after map[string]string
	var err error
	if cur != nil {
		if before, err = s.opts.Labels(key, cur.Value); err != nil {
			return fmt.Errorf("labels of the stored value: %w", err)
		}
	}
	if !m.Delete {
		if after, err = s.opts.Labels(key, m.Value); err != nil {
			return fmt.Errorf("labels: %w", err)
		}
	}
	b := tx.Bucket(bucketLabels)
	for k, v := range before {
		if nv, ok := after[k]; ok && nv == v {
			continue
		}
		if err := b.Delete(indexKey(key, k, v)); err != nil {
			return fmt.Errorf("unindex label %s: %w", k, err)
		}
	}
	for k, v := range after {
		if ov, ok := before[k]; ok && ov == v {
			continue
		}
		if err := b.Put(indexKey(key, k, v), nil); err != nil {
			return fmt.Errorf("index label %s: %w", k, err)
		}
	}
	return nil
}

// prepareIndex makes the label index agree with Options.Labels at Open:
// built from every object when missing, dropped when there is no LabelFunc.
func (s *Store) prepareIndex(tx *bolt.Tx) error {
	if s.opts.Labels == nil {
		if tx.Bucket(bucketLabels) == nil {
			return nil
		}
		if err := tx.DeleteBucket(bucketLabels); err != nil {
			return fmt.Errorf("drop label index: %w", err)
		}
		return nil
	}
	if tx.Bucket(bucketLabels) != nil {
		return nil
	}
	b, err := tx.CreateBucket(bucketLabels)
	if err != nil {
		return fmt.Errorf("create label index: %w", err)
	}
	return tx.Bucket(bucketObjects).ForEach(func(k, v []byte) error {
		res, _, ok := bytes.Cut(k, []byte{0})
		if !ok || len(v) < 8 {
			return fmt.Errorf("object key %q: %w", k, errCorrupt)
		}
		key, err := parseObjectKey(string(res), k)
		if err != nil {
			return err
		}
		e, err := decodeObject(key, v)
		if err != nil {
			return err
		}
		labels, err := s.opts.Labels(key, e.Value)
		if err != nil {
			return fmt.Errorf("build label index: %s: %w", key, err)
		}
		for lk, lv := range labels {
			if err := b.Put(indexKey(key, lk, lv), nil); err != nil {
				return fmt.Errorf("build label index: %s: %w", key, err)
			}
		}
		return nil
	})
}

// LabelIndexed says whether the store keeps a label index
// (Options.Labels), which PageOptions.Labels needs.
func (s *Store) LabelIndexed() bool { return s.opts.Labels != nil }

// indexCandidates returns, in key order, the object keys of f from seek on
// whose current labels satisfy every term, read from the index.
func indexCandidates(tx *bolt.Tx, f filter, terms []LabelIn, seek []byte) ([][]byte, error) {
	b := tx.Bucket(bucketLabels)
	if b == nil {
		return nil, fmt.Errorf("no label index: %w", errCorrupt)
	}
	objPrefix := listPrefix(f.resource, "")
	var cands [][]byte
	for i, t := range terms {
		var keys [][]byte
		for _, v := range t.Values {
			base := termPrefix(f.resource, t.Key, v, "")
			prefix := termPrefix(f.resource, t.Key, v, f.namespace)
			// The index key of the first object not before seek.
			start := append(slices.Clone(base), seek[len(objPrefix):]...)
			if bytes.Compare(start, prefix) < 0 {
				start = prefix
			}
			c := b.Cursor()
			for k, _ := c.Seek(start); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
				okey := make([]byte, 0, len(objPrefix)+len(k)-len(base))
				okey = append(okey, objPrefix...)
				keys = append(keys, append(okey, k[len(base):]...))
			}
		}
		if len(t.Values) > 1 {
			slices.SortFunc(keys, bytes.Compare)
			keys = slices.CompactFunc(keys, bytes.Equal)
		}
		if i == 0 {
			cands = keys
		} else {
			cands = intersect(cands, keys)
		}
		if len(cands) == 0 {
			break
		}
	}
	return cands, nil
}

// intersect returns the keys in both sorted lists a and b, reusing a.
func intersect(a, b [][]byte) [][]byte {
	out := a[:0]
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch c := bytes.Compare(a[i], b[j]); {
		case c < 0:
			i++
		case c > 0:
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}

// matchTerms says whether labels satisfy every term.
func matchTerms(labels map[string]string, terms []LabelIn) bool {
	for _, t := range terms {
		v, ok := labels[t.Key]
		if !ok || !slices.Contains(t.Values, v) {
			return false
		}
	}
	return true
}
