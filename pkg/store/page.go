package store

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// ErrFuture is the error of a list at a revision the store has not reached.
var ErrFuture = errors.New("revision not reached yet")

// PageOptions select one page of a list.
type PageOptions struct {
	// Revision is the revision to read the list at; 0 means the latest.
	// A past revision is read as the store was then, from the current
	// objects and the event log: it fails with ErrGone when the log no
	// longer holds every event since, or no longer keeps the value an
	// object had then (Options.EventLogBytes; see linkPrev for objects
	// whose write left the log).
	Revision int64
	// StartNamespace and StartName: the page begins with the first object
	// whose (namespace, name) is not less than them (byte order, namespace
	// first). They are positions, not keys: any bytes are accepted. For a
	// list of one namespace, StartNamespace is ignored.
	StartNamespace, StartName string
	// Limit is the most entries a page holds; 0 means no limit.
	Limit int
	// Match, when not nil, keeps only the entries it accepts; Limit counts
	// kept entries. An error it returns ends the list with that error.
	Match func(Entry) (bool, error)
	// Labels, when not empty, keeps only the objects whose labels satisfy
	// every term, found through the label index (Options.Labels; without
	// it the list fails) instead of by reading every object of the
	// resource. Match, if set, then sees only those objects.
	Labels []LabelIn
}

// Page is one page of a list.
type Page struct {
	Entries []Entry
	// Revision is the revision the page was read at.
	Revision int64
	// More says that objects follow the last entry (matching Match or
	// not): the next page starts after it.
	More bool
	// Remaining is, when Match and Labels are not set, the number of
	// objects after the page; -1 otherwise (the store does not evaluate
	// them further).
	Remaining int64
}

// ListPage returns a page of the objects of resource in namespace ("" = all
// namespaces) as they were at opts.Revision, ordered by namespace then name,
// from one read transaction. Reading at a past revision costs a scan of the
// events since (at most EventLogSize).
func (s *Store) ListPage(resource, namespace string, opts PageOptions) (Page, error) {
	if opts.Limit < 0 || opts.Revision < 0 {
		return Page{}, fmt.Errorf("list %s: negative limit or revision", resource)
	}
	if len(opts.Labels) > 0 && s.opts.Labels == nil {
		return Page{}, fmt.Errorf("list %s by label: the store keeps no label index", resource)
	}
	var p Page
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		p, err = pageTx(tx, filter{resource: resource, namespace: namespace}, opts, s.opts.Labels)
		return err
	})
	if err != nil {
		return Page{}, fmt.Errorf("list %s in %q: %w", resource, namespace, err)
	}
	return p, nil
}

// change is the first change of a key after the revision a page is read at.
type change struct {
	okey    []byte
	key     Key
	typ     EventType
	rev     int64 // the change's revision
	prevRev int64 // the key's revision at the page's revision
}

// pageTx reads one page; labels is the store's LabelFunc, needed when
// opts.Labels is set.
func pageTx(tx *bolt.Tx, f filter, opts PageOptions, labels LabelFunc) (Page, error) {
	cur, err := decodeRevision(tx.Bucket(bucketMeta).Get(metaRevision))
	if err != nil {
		return Page{}, fmt.Errorf("read revision: %w", err)
	}
	at := opts.Revision
	if at == 0 {
		at = cur
	}
	if at > cur {
		return Page{}, fmt.Errorf("revision %d, the store is at %d: %w", at, cur, ErrFuture)
	}
	prefix := listPrefix(f.resource, f.namespace)
	seek := slices.Clone(prefix)
	if f.namespace == "" {
		if opts.StartNamespace != "" || opts.StartName != "" {
			seek = append(seek, opts.StartNamespace...)
			seek = append(seek, 0)
			seek = append(seek, opts.StartName...)
		}
	} else {
		seek = append(seek, opts.StartName...)
	}
	changes, err := changesSince(tx, f, at, cur, seek)
	if err != nil {
		return Page{}, err
	}

	p := Page{Revision: at, Remaining: -1}
	filtered := opts.Match != nil || len(opts.Labels) > 0
	if !filtered {
		p.Remaining = 0
	}
	full := false
	// next walks the current objects from seek on: all of them, or, by
	// label, those the index names. Keys changed since the page's revision
	// come from changes either way; their labels then are checked below.
	var next func() (k, v []byte)
	if len(opts.Labels) > 0 {
		cands, err := indexCandidates(tx, f, opts.Labels, seek)
		if err != nil {
			return Page{}, err
		}
		objects := tx.Bucket(bucketObjects)
		next = func() (k, v []byte) {
			for len(cands) > 0 {
				k, cands = cands[0], cands[1:]
				if v = objects.Get(k); v != nil {
					return k, v
				}
			}
			return nil, nil
		}
	} else {
		c := tx.Bucket(bucketObjects).Cursor()
		first := true
		next = func() (k, v []byte) {
			if first {
				first = false
				k, v = c.Seek(seek)
			} else {
				k, v = c.Next()
			}
			if k != nil && !bytes.HasPrefix(k, prefix) {
				return nil, nil
			}
			return k, v
		}
	}
	k, v := next()
	for ci := 0; k != nil || ci < len(changes); {
		// The next key in order: the current object's, a change's, or both.
		var (
			ch   *change
			okey []byte
			val  []byte
		)
		switch {
		case k == nil:
			ch = &changes[ci]
		case ci < len(changes):
			switch cmp := bytes.Compare(changes[ci].okey, k); {
			case cmp < 0:
				ch = &changes[ci]
			case cmp == 0:
				ch = &changes[ci]
				okey = k
			default:
				okey, val = k, v
			}
		default:
			okey, val = k, v
		}
		if ch != nil {
			ci++
		}
		if okey != nil {
			k, v = next()
		}
		if ch != nil && ch.typ == Added {
			continue // created since: not in the list at that revision
		}
		if full {
			p.More = true
			if filtered {
				break
			}
			p.Remaining++
			continue
		}
		var e Entry
		if ch != nil {
			if e, err = valueAt(tx, *ch); err != nil {
				return Page{}, err
			}
			if len(opts.Labels) > 0 {
				// Not in the index as it was then: check its labels.
				l, err := labels(e.Key, e.Value)
				if err != nil {
					return Page{}, fmt.Errorf("labels of %s at revision %d: %w", e.Key, e.Revision, err)
				}
				if !matchTerms(l, opts.Labels) {
					continue
				}
			}
		} else {
			key, err := parseObjectKey(f.resource, okey)
			if err != nil {
				return Page{}, err
			}
			if e, err = decodeObject(key, val); err != nil {
				return Page{}, err
			}
		}
		if opts.Match != nil {
			ok, err := opts.Match(e)
			if err != nil {
				return Page{}, err
			}
			if !ok {
				continue
			}
		}
		p.Entries = append(p.Entries, e)
		full = opts.Limit > 0 && len(p.Entries) >= opts.Limit
	}
	return p, nil
}

// changesSince returns the first change after revision at of every key
// matching f from seek on, in key order, read from the log of events in
// (at, cur]; ErrGone when the log no longer holds them all.
func changesSince(tx *bolt.Tx, f filter, at, cur int64, seek []byte) ([]change, error) {
	if at == cur {
		return nil, nil
	}
	var (
		changes []change
		seen    = make(map[Key]bool)
		next    = at + 1
	)
	c := tx.Bucket(bucketEvents).Cursor()
	for k, v := c.Seek(encodeRevision(at + 1)); k != nil; k, v = c.Next() {
		r, err := decodeRecord(k, v, false)
		if err != nil {
			return nil, err
		}
		if r.rev != next {
			return nil, fmt.Errorf("revision %d: event %d was compacted: %w", at, next, ErrGone)
		}
		next++
		if !f.match(r.key) || seen[r.key] {
			continue
		}
		okey := objectKey(r.key)
		if bytes.Compare(okey, seek) < 0 {
			continue
		}
		seen[r.key] = true
		changes = append(changes, change{okey: okey, key: r.key, typ: r.typ, rev: r.rev, prevRev: r.prevRev})
	}
	if next != cur+1 {
		return nil, fmt.Errorf("revision %d: events after %d were compacted: %w", at, next-1, ErrGone)
	}
	slices.SortFunc(changes, func(a, b change) int { return bytes.Compare(a.okey, b.okey) })
	return changes, nil
}

// valueAt reads from the log the value ch's key had before ch: the value
// of the event at ch.prevRev, or the copy kept for ch when that event left
// the log (see linkPrev).
func valueAt(tx *bolt.Tx, ch change) (Entry, error) {
	if pv := tx.Bucket(bucketPrev).Get(encodeRevision(ch.rev)); pv != nil {
		v, err := decodePrev(pv)
		if err != nil {
			return Entry{}, fmt.Errorf("%s at revision %d: %w", ch.key, ch.prevRev, err)
		}
		return Entry{Key: ch.key, Value: v, Revision: ch.prevRev}, nil
	}
	k := encodeRevision(ch.prevRev)
	v := tx.Bucket(bucketEvents).Get(k)
	if v == nil {
		return Entry{}, fmt.Errorf("%s: the value of revision %d was compacted: %w", ch.key, ch.prevRev, ErrGone)
	}
	r, err := decodeRecord(k, v, true)
	if err != nil {
		return Entry{}, err
	}
	if r.key != ch.key || r.typ == Deleted {
		return Entry{}, fmt.Errorf("event %d is not a write of %s: %w", ch.prevRev, ch.key, errCorrupt)
	}
	if r.stripped {
		return Entry{}, fmt.Errorf("%s: the log no longer keeps the value of revision %d: %w", ch.key, ch.prevRev, ErrGone)
	}
	if r.value == nil {
		r.value = []byte{}
	}
	return Entry{Key: ch.key, Value: r.value, Revision: ch.prevRev}, nil
}

// parseObjectKey is the inverse of objectKey for a key of resource.
func parseObjectKey(resource string, k []byte) (Key, error) {
	ns, name, ok := bytes.Cut(k[len(resource)+1:], []byte{0})
	if !ok {
		return Key{}, fmt.Errorf("object key %q: %w", k, errCorrupt)
	}
	return Key{Resource: resource, Namespace: string(ns), Name: string(name)}, nil
}
