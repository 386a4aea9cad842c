package apiserver

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"

	"github.com/knbox/knbox/pkg/store"
)

// quotaResync is how often every quota's status is recomputed even without
// a change seen (kube-controller-manager's --resource-quota-sync-period).
const quotaResync = 5 * time.Minute

// runQuotaStatus keeps status.hard and status.used of every ResourceQuota
// up to date, so `kubectl describe quota` shows used/hard. It is
// level-triggered on namespaces: a namespace is queued when an object of
// any kind is added to or deleted from it, when one of its ResourceQuotas
// changes, when the Ledger's reservations in it change, and every
// quotaResync; a pass recomputes each of its quotas from the store and the
// Ledger and writes the status that changed.
func (s *Server) runQuotaStatus(ctx context.Context) {
	q := workqueue.NewNamedRateLimitingQueue(workqueue.DefaultControllerRateLimiter(), "quota-status")
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	s.opts.Admitter.Ledger.OnChange(func(ns string) { q.Add(ns) })
	for _, k := range s.kinds.All() {
		if k.Namespaced {
			go s.watchForQuota(ctx, k, q)
		}
	}
	go func() {
		t := time.NewTicker(quotaResync)
		defer t.Stop()
		for {
			s.enqueueQuotaNamespaces(ctx, q)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	for {
		item, shutdown := q.Get()
		if shutdown {
			return
		}
		ns := item.(string)
		if err := s.syncQuotaStatus(ctx, ns); err != nil && ctx.Err() == nil {
			s.log.Warn("updating resource quota status", "namespace", ns, "err", err)
			q.AddRateLimited(item)
		} else {
			q.Forget(item)
		}
		q.Done(item)
	}
}

func (s *Server) enqueueQuotaNamespaces(ctx context.Context, q workqueue.Interface) {
	k := s.kinds.Lookup("", "resourcequotas")
	entries, _, err := s.store.List(k.storeResource(), "")
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("listing resource quotas", "err", err)
		}
		return
	}
	for _, e := range entries {
		q.Add(e.Key.Namespace)
	}
}

// watchForQuota queues the namespace of every object of k that comes or
// goes (and of every ResourceQuota that changes), until ctx ends.
func (s *Server) watchForQuota(ctx context.Context, k *Kind, q workqueue.Interface) {
	isQuota := k.Group == "" && k.Resource == "resourcequotas"
	var from int64
	for ctx.Err() == nil {
		ch, err := s.store.Watch(ctx, k.storeResource(), "", from, false)
		if errors.Is(err, store.ErrGone) {
			from = 0 // events were missed: a resync covers them
			s.enqueueQuotaNamespaces(ctx, q)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("watching for quota status", "resource", k.storeResource(), "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range ch {
			from = ev.Entry.Revision
			if ev.Type != store.Modified || isQuota {
				q.Add(ev.Entry.Key.Namespace)
			}
		}
	}
}

// syncQuotaStatus recomputes the status of each ResourceQuota in ns.
func (s *Server) syncQuotaStatus(ctx context.Context, ns string) error {
	k := s.kinds.Lookup("", "resourcequotas")
	entries, _, err := s.store.List(k.storeResource(), ns)
	if err != nil {
		return err
	}
	for _, e := range entries {
		obj, err := decodeStored(k, e.Value)
		if err != nil {
			return err
		}
		rq := obj.(*corev1.ResourceQuota)
		used, err := s.opts.Admitter.Ledger.Used(ctx, rq)
		if err != nil {
			return err
		}
		want := corev1.ResourceQuotaStatus{Hard: rq.Spec.Hard.DeepCopy(), Used: used}
		if apiequality.Semantic.DeepEqual(rq.Status, want) {
			continue
		}
		rq.Status = want
		_, err = s.writeBack(k, rq, e)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // changed meanwhile: its event queues ns again
		}
		if err != nil {
			return err
		}
	}
	return nil
}
