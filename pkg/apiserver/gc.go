package apiserver

import (
	"context"
	"encoding/json"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/knbox/knbox/pkg/store"
)

// gcKey is the garbage collector's only work item: one full pass. Passes
// are level-triggered: each reads the whole store, so a restart (even after
// kill -9 in the middle of a cascade) finishes what was left.
const gcKey = "pass"

// gcPageSize is how many objects a pass reads from the store at once. The
// pages are read at the latest revision each: an object written between
// two pages may be missed by this pass, and is seen by the next (its
// owner's deletion queues one, and an owner not seen is looked up).
var gcPageSize = 256 // a variable for the tests

func (s *Server) runGC(ctx context.Context) {
	for {
		item, shutdown := s.gc.Get()
		if shutdown {
			return
		}
		changed, err := s.gcPass(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil { // a stopping server's closed store is no failure
				s.log.Error("garbage collection pass failed", "err", err)
			}
			s.gc.AddRateLimited(item)
		case changed:
			// Deleting dependents may orphan their own dependents.
			s.gc.AddRateLimited(item)
		default:
			s.gc.Forget(item)
		}
		s.gc.Done(item)
	}
}

// metaOnly decodes just the metadata of a stored object that the garbage
// collector reads.
type metaOnly struct {
	Metadata gcMeta `json:"metadata"`
}

// gcMeta is the part of ObjectMeta that a pass reads (the same names and
// JSON keys). A pass holds it for every object in the store at once, so it
// leaves out what a pass never reads: decoding managedFields, labels and
// annotations of every object made each pass allocate several times more
// (a pass runs on every deletion, and every instance that stops).
type gcMeta struct {
	Name              string                  `json:"name,omitempty"`
	Namespace         string                  `json:"namespace,omitempty"`
	UID               types.UID               `json:"uid,omitempty"`
	DeletionTimestamp *metav1.Time            `json:"deletionTimestamp,omitempty"`
	OwnerReferences   []metav1.OwnerReference `json:"ownerReferences,omitempty"`
	Finalizers        []string                `json:"finalizers,omitempty"`
}

type gcObject struct {
	kind *Kind
	meta gcMeta
}

// gcPass deletes dependents whose owners are all gone, drops owner
// references to deleted owners when others remain, completes foreground
// deletions whose dependents are gone, and empties and removes namespaces
// that are terminating. It reports whether it changed anything.
func (s *Server) gcPass(ctx context.Context) (changed bool, err error) {
	var objs []gcObject
	uids := map[types.UID]bool{}
	for _, k := range s.kinds.All() {
		if k.Virtual {
			continue
		}
		// By pages: a pass holds the metadata of every object, not the
		// values of a whole kind (thousands of Events) at once.
		opts := store.PageOptions{Limit: gcPageSize}
		for {
			page, err := s.store.ListPage(k.storeResource(), "", opts)
			if err != nil {
				return false, err
			}
			for _, e := range page.Entries {
				var mo metaOnly
				if err := json.Unmarshal(e.Value, &mo); err != nil {
					return false, err
				}
				objs = append(objs, gcObject{kind: k, meta: mo.Metadata})
				uids[mo.Metadata.UID] = true
			}
			if !page.More || len(page.Entries) == 0 {
				break
			}
			last := page.Entries[len(page.Entries)-1].Key
			// The next page starts after the last entry: its name with a
			// zero byte appended is the least position after it.
			opts.StartNamespace, opts.StartName = last.Namespace, last.Name+"\x00"
		}
	}
	terminating := map[string]bool{}
	for _, o := range objs {
		if o.kind.Kind == "Namespace" && o.meta.DeletionTimestamp != nil {
			terminating[o.meta.Name] = true
		}
	}
	// Owners deleted in the foreground: their dependents go first.
	foreground := map[types.UID]bool{}
	for _, o := range objs {
		if o.meta.DeletionTimestamp != nil && contains(o.meta.Finalizers, metav1.FinalizerDeleteDependents) {
			foreground[o.meta.UID] = true
		}
	}
	hasDependents := map[types.UID]bool{}
	nsContent := map[string]int{}
	for _, o := range objs {
		for _, ref := range o.meta.OwnerReferences {
			hasDependents[ref.UID] = true
		}
		if o.kind.Namespaced {
			nsContent[o.meta.Namespace]++
		}
	}
	bg := metav1.DeletePropagationBackground
	for _, o := range objs {
		m := o.meta
		if o.kind.Namespaced && terminating[m.Namespace] {
			if m.DeletionTimestamp == nil {
				if _, err := s.deleteObject(ctx, o.kind, m.Namespace, m.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
					return changed, err
				}
				changed = true
			}
			continue
		}
		if len(m.OwnerReferences) > 0 {
			var live []metav1.OwnerReference
			staying := 0
			for _, ref := range m.OwnerReferences {
				if uids[ref.UID] || s.ownerExists(m.Namespace, ref) {
					live = append(live, ref)
					if !foreground[ref.UID] {
						staying++
					}
				}
			}
			switch {
			case staying == 0 && m.DeletionTimestamp == nil:
				if _, err := s.deleteObject(ctx, o.kind, m.Namespace, m.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
					return changed, err
				}
				changed = true
				continue
			case len(live) > 0 && len(live) < len(m.OwnerReferences):
				if err := s.setOwners(o.kind, m.Namespace, m.Name, m.UID, live); err != nil {
					return changed, err
				}
				changed = true
			}
		}
		if m.DeletionTimestamp != nil && contains(m.Finalizers, metav1.FinalizerDeleteDependents) && !hasDependents[m.UID] {
			if err := s.removeFinalizer(o.kind, m.Namespace, m.Name, metav1.FinalizerDeleteDependents); err != nil {
				return changed, err
			}
			changed = true
		}
	}
	for ns := range terminating {
		if nsContent[ns] > 0 {
			continue
		}
		k := s.kinds.Lookup("", "namespaces")
		_, err := s.store.Delete(s.key(k, "", ns), 0)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return changed, err
		}
		changed = true
	}
	return changed, nil
}

// ownerExists verifies an owner by a live lookup, so an owner created after
// the pass took its snapshot is not mistaken for a deleted one.
func (s *Server) ownerExists(namespace string, ref metav1.OwnerReference) bool {
	_, ok, _ := s.owner(namespace, ref)
	return ok
}

// owner reads the metadata of the owner ref refers to; false when it does
// not exist (or another object of its name does); err when it cannot be
// read.
func (s *Server) owner(namespace string, ref metav1.OwnerReference) (mo metaOnly, ok bool, err error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return mo, false, nil
	}
	k := s.kinds.ByKind(gv.Group, ref.Kind)
	if k == nil {
		return mo, false, nil
	}
	ns := namespace
	if !k.Namespaced {
		ns = ""
	}
	e, err := s.store.Get(s.key(k, ns, ref.Name))
	if errors.Is(err, store.ErrNotFound) {
		return mo, false, nil
	}
	if err != nil {
		return mo, false, err
	}
	if err := json.Unmarshal(e.Value, &mo); err != nil {
		return mo, false, err
	}
	return mo, mo.Metadata.UID == ref.UID, nil
}

// ownersInFlux says whether a Pod with owner references refs, just stored
// or just deleted, is a garbage collector pass's business: one of its
// owners is gone, is being deleted (in the foreground it waits for its
// Pods), or cannot be read. Instances start and stop all the time, and a
// pass reads the whole store, so their Pods ask for one only then; an
// owner deleted after this look queues its own pass, which sees the Pod
// as stored or deleted here.
func (s *Server) ownersInFlux(namespace string, refs []metav1.OwnerReference) bool {
	for _, ref := range refs {
		mo, ok, err := s.owner(namespace, ref)
		if err != nil || !ok || mo.Metadata.DeletionTimestamp != nil {
			return true
		}
	}
	return false
}

// ownerLive tells whether an owner exists (by a live lookup, with the UID
// referred to) and is not being deleted. An owner that cannot be read
// counts as live: the caller then does what it does for a live one.
func (s *Server) ownerLive(namespace string, ref metav1.OwnerReference) bool {
	mo, ok, err := s.owner(namespace, ref)
	return err != nil || ok && mo.Metadata.DeletionTimestamp == nil
}

// modify reads, changes and writes back one object, skipping admission.
func (s *Server) modify(k *Kind, namespace, name string, uid types.UID, change func(m *metav1.ObjectMeta)) error {
	for attempt := 0; attempt < 5; attempt++ {
		cur, entry, err := s.getStored(k, namespace, name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		m := accessor(cur)
		if m.UID != uid {
			return nil
		}
		change(m)
		if m.DeletionTimestamp != nil && len(m.Finalizers) == 0 {
			_, err = s.store.Delete(s.key(k, namespace, name), entry.Revision)
		} else {
			_, err = s.writeBack(k, cur, entry)
		}
		if errors.Is(err, store.ErrConflict) || apierrors.IsConflict(err) {
			continue
		}
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	}
	return conflict(k, name)
}

func (s *Server) setOwners(k *Kind, namespace, name string, uid types.UID, refs []metav1.OwnerReference) error {
	return s.modify(k, namespace, name, uid, func(m *metav1.ObjectMeta) { m.OwnerReferences = refs })
}

func (s *Server) removeFinalizer(k *Kind, namespace, name, finalizer string) error {
	cur, _, err := s.getStored(k, namespace, name)
	if err != nil {
		return client404(err)
	}
	return s.modify(k, namespace, name, accessor(cur).UID, func(m *metav1.ObjectMeta) {
		var keep []string
		for _, f := range m.Finalizers {
			if f != finalizer {
				keep = append(keep, f)
			}
		}
		m.Finalizers = keep
	})
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// orphanDependents removes owner references to uid, so deleting the owner
// leaves its dependents alone (propagationPolicy Orphan).
func (s *Server) orphanDependents(_ context.Context, uid types.UID) error {
	for _, k := range s.kinds.All() {
		if k.Virtual {
			continue
		}
		entries, _, err := s.store.List(k.storeResource(), "")
		if err != nil {
			return err
		}
		for _, e := range entries {
			var mo metaOnly
			if err := json.Unmarshal(e.Value, &mo); err != nil {
				return err
			}
			var keep []metav1.OwnerReference
			found := false
			for _, ref := range mo.Metadata.OwnerReferences {
				if ref.UID == uid {
					found = true
					continue
				}
				keep = append(keep, ref)
			}
			if !found {
				continue
			}
			if err := s.setOwners(k, mo.Metadata.Namespace, mo.Metadata.Name, mo.Metadata.UID, keep); err != nil {
				return err
			}
		}
	}
	return nil
}
