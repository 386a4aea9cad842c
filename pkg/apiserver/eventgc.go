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
// does both: it watches the Events to know each namespace's, and sweeps
// the expired ones every tenth of the TTL (between a second and a minute).

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
		names := map[string]map[string]bool{} // namespace -> names of its events
	watch:
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s.expireEvents(k, time.Now().Add(-s.limits.EventTTL))
			case ev, ok := <-ch:
				if !ok {
					break watch
				}
				key := ev.Entry.Key
				if ev.Type == store.Deleted {
					delete(names[key.Namespace], key.Name)
					if len(names[key.Namespace]) == 0 {
						delete(names, key.Namespace)
					}
					continue
				}
				if names[key.Namespace] == nil {
					names[key.Namespace] = map[string]bool{}
				}
				names[key.Namespace][key.Name] = true
				if len(names[key.Namespace]) > s.limits.MaxEventsPerNamespace {
					s.trimEvents(k, key.Namespace)
				}
			}
		}
	}
}

// storedEvent is an Event read for its bounds.
type storedEvent struct {
	entry store.Entry
	seen  time.Time
}

// listEvents reads the Events of namespace ("" = all).
func (s *Server) listEvents(k *Kind, namespace string) []storedEvent {
	entries, _, err := s.store.List(k.storeResource(), namespace)
	if err != nil {
		s.log.Warn("listing events for their bounds", "err", err)
		return nil
	}
	evs := make([]storedEvent, 0, len(entries))
	for _, e := range entries {
		obj, err := decodeStored(k, e.Value)
		if err != nil {
			continue
		}
		evs = append(evs, storedEvent{entry: e, seen: eventTime(obj.(*corev1.Event))})
	}
	return evs
}

// deleteEvent deletes an Event unless it changed since it was read.
func (s *Server) deleteEvent(e store.Entry) {
	if _, err := s.store.Delete(e.Key, e.Revision); err != nil && !isGoneOrChanged(err) {
		s.log.Warn("deleting an event", "namespace", e.Key.Namespace, "name", e.Key.Name, "err", err)
	}
}

func isGoneOrChanged(err error) bool {
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict)
}

// expireEvents deletes the Events last seen before cutoff.
func (s *Server) expireEvents(k *Kind, cutoff time.Time) {
	for _, e := range s.listEvents(k, "") {
		if e.seen.Before(cutoff) {
			s.deleteEvent(e.entry)
		}
	}
}

// trimEvents deletes the least recently seen Events of namespace beyond
// MaxEventsPerNamespace.
func (s *Server) trimEvents(k *Kind, namespace string) {
	evs := s.listEvents(k, namespace)
	over := len(evs) - s.limits.MaxEventsPerNamespace
	if over <= 0 {
		return
	}
	slices.SortFunc(evs, func(a, b storedEvent) int {
		return cmp.Or(a.seen.Compare(b.seen), cmp.Compare(a.entry.Revision, b.entry.Revision))
	})
	for _, e := range evs[:over] {
		s.deleteEvent(e.entry)
	}
}
