package apiserver

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/knbox/knbox/pkg/store"
)

// Events are bounded as kube-apiserver bounds them, by a TTL
// (Limits.EventTTL: an Event not seen again for that long goes), and also
// by count per namespace (Limits.MaxEventsPerNamespace: the least recently
// seen go first), so a noisy controller cannot fill the store. One loop
// does both from a watch of the Events, which tells it when each was last
// seen: it trims a namespace as soon as it holds too many, and sweeps the
// expired ones every tenth of the TTL (between a second and a minute).

// seenEvent is what the loop keeps of an Event.
type seenEvent struct {
	key  store.Key
	rev  int64 // the revision it was seen at: deleted only if unchanged
	seen time.Time
}

// runEventGC deletes expired Events and those over a namespace's count,
// until ctx ends.
func (s *Server) runEventGC(ctx context.Context) {
	k := s.kinds.Lookup("", "events")
	if k == nil {
		return
	}
	every := min(max(s.limits.EventTTL/10, time.Second), time.Minute)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for ctx.Err() == nil {
		ch, err := s.store.Watch(ctx, k.storeResource(), "", 0, true)
		if err != nil {
			s.log.Warn("watching events for their bounds", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				continue
			}
		}
		events := map[string]map[string]seenEvent{} // namespace -> name -> event
	watch:
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s.expireEvents(events, time.Now().Add(-s.limits.EventTTL))
			case ev, ok := <-ch:
				if !ok {
					break watch
				}
				key := ev.Entry.Key
				ns := events[key.Namespace]
				if ev.Type == store.Deleted {
					delete(ns, key.Name)
					if len(ns) == 0 {
						delete(events, key.Namespace)
					}
					continue
				}
				if ns == nil {
					ns = map[string]seenEvent{}
					events[key.Namespace] = ns
				}
				se := seenEvent{key: key, rev: ev.Entry.Revision, seen: time.Now()}
				if obj, err := decodeStored(k, ev.Entry.Value); err == nil {
					if t := eventTime(obj.(*corev1.Event)); !t.IsZero() {
						se.seen = t
					}
				}
				ns[key.Name] = se
				if len(ns) > s.limits.MaxEventsPerNamespace {
					s.trimEvents(ns)
				}
			}
		}
	}
}

// deleteEvent deletes an Event unless it changed since it was seen (the
// watch reports the change), and says whether it is gone.
func (s *Server) deleteEvent(e seenEvent) bool {
	_, err := s.store.Delete(e.key, e.rev)
	switch {
	case err == nil, errors.Is(err, store.ErrNotFound):
		return true
	case !errors.Is(err, store.ErrConflict):
		s.log.Warn("deleting an event", "namespace", e.key.Namespace, "name", e.key.Name, "err", err)
	}
	return false
}

// expireEvents deletes the Events last seen before cutoff.
func (s *Server) expireEvents(events map[string]map[string]seenEvent, cutoff time.Time) {
	for _, ns := range events {
		for _, e := range ns {
			if e.seen.Before(cutoff) {
				s.deleteEvent(e)
			}
		}
	}
}

// trimEvents deletes the least recently seen Events of a namespace that
// holds more than MaxEventsPerNamespace, down to nine tenths of it.
func (s *Server) trimEvents(ns map[string]seenEvent) {
	evs := make([]seenEvent, 0, len(ns))
	for _, e := range ns {
		evs = append(evs, e)
	}
	slices.SortFunc(evs, func(a, b seenEvent) int {
		return cmp.Or(a.seen.Compare(b.seen), cmp.Compare(a.rev, b.rev))
	})
	// Down to nine tenths of the cap, not to the cap: the namespace is
	// then sorted once per tenth of its cap of new Events, not for each.
	// (A burst of Events, such as making a few hundred Services, sorted
	// the whole namespace for every one of them.)
	keep := s.limits.MaxEventsPerNamespace - s.limits.MaxEventsPerNamespace/10
	for _, e := range evs[:len(evs)-keep] {
		if s.deleteEvent(e) {
			// Not counted again before the watch reports the deletion.
			delete(ns, e.key.Name)
		}
	}
}
