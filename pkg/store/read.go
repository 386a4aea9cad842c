package store

import (
	"bytes"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// view runs fn in a bbolt read transaction, reporting ErrClosed after Close.
func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	err := s.db.View(fn)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

// Get returns the object under key, or ErrNotFound.
func (s *Store) Get(key Key) (Entry, error) {
	if err := key.validate(); err != nil {
		return Entry{}, fmt.Errorf("get: %w", err)
	}
	var e Entry
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketObjects).Get(objectKey(key))
		if v == nil {
			return ErrNotFound
		}
		var err error
		e, err = decodeObject(key, v)
		return err
	})
	if err != nil {
		return Entry{}, fmt.Errorf("get %s: %w", key, err)
	}
	return e, nil
}

// List returns the entries of resource in namespace ("" = all namespaces),
// ordered by namespace then name, and the revision at which the list was
// taken: a consistent snapshot from one read transaction.
func (s *Store) List(resource, namespace string) ([]Entry, int64, error) {
	var (
		list []Entry
		rev  int64
	)
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		list, rev, err = listTx(tx, filter{resource: resource, namespace: namespace})
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list %s in %q: %w", resource, namespace, err)
	}
	return list, rev, nil
}

// listTx reads the objects matching f and the revision of tx's snapshot.
func listTx(tx *bolt.Tx, f filter) ([]Entry, int64, error) {
	rev, err := decodeRevision(tx.Bucket(bucketMeta).Get(metaRevision))
	if err != nil {
		return nil, 0, fmt.Errorf("read revision: %w", err)
	}
	var (
		list   []Entry
		lastNS string // namespaces repeat: share their strings
	)
	prefix := listPrefix(f.resource, f.namespace)
	c := tx.Bucket(bucketObjects).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		ns, name, ok := bytes.Cut(k[len(f.resource)+1:], []byte{0})
		if !ok {
			return nil, 0, fmt.Errorf("object key %q: %w", k, errCorrupt)
		}
		if string(ns) != lastNS {
			lastNS = string(ns)
		}
		key := Key{Resource: f.resource, Namespace: lastNS, Name: string(name)}
		e, err := decodeObject(key, v)
		if err != nil {
			return nil, 0, err
		}
		list = append(list, e)
	}
	return list, rev, nil
}

// filter selects the objects of one resource in one namespace, or in all
// namespaces when namespace is "".
type filter struct{ resource, namespace string }

func (f filter) match(k Key) bool {
	return k.Resource == f.resource && (f.namespace == "" || k.Namespace == f.namespace)
}
