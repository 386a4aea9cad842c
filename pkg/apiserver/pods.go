package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/util/workqueue"

	"github.com/knbox/knbox/pkg/store"
)

// PodSource is the runtime side's instances seen as core/v1 Pods (package
// replicas' Manager, adapted by the daemon): the API mirrors them.
type PodSource interface {
	// Pods returns every instance as a Pod.
	Pods() []*corev1.Pod
	// Pod returns one instance; false once it is gone.
	Pod(namespace, name string) (*corev1.Pod, bool)
	// DeletePod stops one instance gracefully, in the background (its
	// Revision replaces it). Idempotent.
	DeletePod(namespace, name string) error
	// SubscribePods registers f, called without blocking whenever an
	// instance is made, changes or ends.
	SubscribePods(f func(namespace, name string))
}

// PodFinalizer keeps a mirrored Pod in the store while its instance stops:
// a deleted Pod is marked (deletionTimestamp, kubectl shows Terminating),
// the mirror stops the instance, and removes the Pod once it is gone.
const PodFinalizer = "knbox.dev/instance"

// podResyncInterval is how often the mirror compares every Pod with the
// instances, besides following their changes.
const podResyncInterval = time.Minute

// podsKind is the core/v1 Pod kind: read-only to users but for delete;
// the mirror writes it (RunPods).
func podsKind() *Kind {
	return &Kind{
		Group: "", Version: "v1", Kind: "Pod", Resource: "pods", Singular: "pod",
		ShortNames: []string{"po"}, Categories: []string{"all"}, Namespaced: true, HasStatus: true, Mirror: true,
		New: func() runtime.Object { return &corev1.Pod{} }, NewList: func() runtime.Object { return &corev1.PodList{} },
		Columns: cols(col("Ready", "string", "The number of containers ready"), col("Status", "string", "The pod's state"),
			col("Restarts", "string", "The number of restarts"), col("IP", "string", "The pod's IP address"),
			col("Node", "string", "The node the pod runs on")),
		Row: func(o runtime.Object) []interface{} {
			p := o.(*corev1.Pod)
			ready, restarts := 0, int32(0)
			for _, c := range p.Status.ContainerStatuses {
				if c.Ready {
					ready++
				}
				restarts = max(restarts, c.RestartCount)
			}
			ip := p.Status.PodIP
			if ip == "" {
				ip = "<none>"
			}
			return []interface{}{fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers)), podStatusText(p), strconv.Itoa(int(restarts)), ip, p.Spec.NodeName}
		},
		FieldLabels: map[string]func(runtime.Object) string{
			"spec.nodeName":           func(o runtime.Object) string { return o.(*corev1.Pod).Spec.NodeName },
			"spec.serviceAccountName": func(o runtime.Object) string { return o.(*corev1.Pod).Spec.ServiceAccountName },
			"status.phase":            func(o runtime.Object) string { return string(o.(*corev1.Pod).Status.Phase) },
			"status.podIP":            func(o runtime.Object) string { return o.(*corev1.Pod).Status.PodIP },
		},
	}
}

// podStatusText is the STATUS column as kubectl prints it: Terminating,
// else a container's waiting reason, else the phase.
func podStatusText(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "Terminating"
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason
		}
	}
	return string(p.Status.Phase)
}

// RunPods mirrors src's instances as Pods in the store until ctx ends:
// a Pod is created for each new instance, its status kept, and it is
// removed once the instance is gone; a Pod deleted through the API stops
// its instance. Start it once the instances of an earlier run are adopted,
// or their Pods are removed and made again with new UIDs.
func (s *Server) RunPods(ctx context.Context, src PodSource) {
	q := workqueue.NewNamedRateLimitingQueue(workqueue.DefaultControllerRateLimiter(), "pods")
	s.podsMu.Lock()
	s.pods, s.podQueue = src, q
	s.podsMu.Unlock()
	defer func() {
		s.podsMu.Lock()
		s.podQueue = nil
		s.podsMu.Unlock()
	}()
	src.SubscribePods(func(ns, name string) { q.Add(ns + "/" + name) })
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	go func() {
		t := time.NewTicker(podResyncInterval)
		defer t.Stop()
		for {
			q.Add(resyncKey)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	for {
		item, quit := q.Get()
		if quit {
			return
		}
		key := item.(string)
		err := s.syncPodKey(key)
		if err != nil {
			s.log.Warn("mirror pod", "pod", key, "err", err)
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

const resyncKey = "*"

// podChanged queues a Pod the API changed (a delete) for the mirror.
func (s *Server) podChanged(namespace, name string) {
	s.podsMu.Lock()
	q := s.podQueue
	s.podsMu.Unlock()
	if q != nil {
		q.Add(namespace + "/" + name)
	}
}

func (s *Server) syncPodKey(key string) error {
	k := s.kinds.Lookup("", "pods")
	if k == nil {
		return nil
	}
	if key != resyncKey {
		ns, name, _ := strings.Cut(key, "/")
		return s.syncPod(k, ns, name)
	}
	keys := map[string]bool{}
	for _, p := range s.pods.Pods() {
		keys[p.Namespace+"/"+p.Name] = true
	}
	entries, _, err := s.store.List(k.storeResource(), "")
	if err != nil {
		return err
	}
	for _, e := range entries {
		obj, err := decodeStored(k, e.Value)
		if err != nil {
			return err
		}
		m := accessor(obj)
		keys[m.Namespace+"/"+m.Name] = true
	}
	var errs []error
	for key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		if err := s.syncPod(k, ns, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// syncPod brings the stored Pod namespace/name in line with its instance.
func (s *Server) syncPod(k *Kind, ns, name string) error {
	want, running := s.pods.Pod(ns, name)
	obj, entry, err := s.getStored(k, ns, name)
	stored := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	switch {
	case !running && !stored:
		return nil
	case !running:
		// The instance is gone: so is its Pod.
		_, err := s.store.Mutate(s.key(k, ns, name), func(c *store.Entry, rev int64) (store.Mutation, error) {
			if c == nil {
				return store.Mutation{}, store.ErrNotFound
			}
			if c.Revision != entry.Revision {
				return store.Mutation{}, store.ErrConflict
			}
			cur := obj.(*corev1.Pod)
			cur.ResourceVersion = strconv.FormatInt(rev, 10)
			cur.Finalizers = nil
			b, err := encodeStored(k, cur)
			return store.Mutation{Value: b, Delete: true}, err
		})
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	case !stored:
		if err := s.checkNamespace(k, ns, name); err != nil {
			// No Pods in a namespace that is gone or going: its
			// instances are being stopped with their Revisions.
			return nil
		}
		want.UID = uuid.NewUUID()
		want.Finalizers = []string{PodFinalizer}
		_, err := s.store.Create(s.key(k, ns, name), func(rev int64) ([]byte, error) {
			want.ResourceVersion = strconv.FormatInt(rev, 10)
			return encodeStored(k, want)
		})
		if errors.Is(err, store.ErrExists) {
			s.podChanged(ns, name)
			return nil
		}
		if err == nil {
			s.gc.Add(gcKey) // its owner may be gone already
		}
		return err
	}
	cur := obj.(*corev1.Pod)
	if cur.DeletionTimestamp != nil {
		if err := s.pods.DeletePod(ns, name); err != nil {
			return fmt.Errorf("stop instance: %w", err)
		}
		if again, ok := s.pods.Pod(ns, name); ok {
			want = again
		}
	}
	want.ObjectMeta.UID = cur.UID
	want.CreationTimestamp = cur.CreationTimestamp
	want.DeletionTimestamp, want.DeletionGracePeriodSeconds = cur.DeletionTimestamp, cur.DeletionGracePeriodSeconds
	want.Finalizers = cur.Finalizers
	want.ResourceVersion = cur.ResourceVersion
	want.Generation = cur.Generation
	want.ManagedFields = cur.ManagedFields
	want.TypeMeta = cur.TypeMeta
	if equality.Semantic.DeepEqual(want, cur) {
		return nil
	}
	_, err = s.storeUpdate(s.key(k, ns, name), entry.Revision, cur.DeletionTimestamp != nil, func(rev int64) ([]byte, error) {
		want.ResourceVersion = strconv.FormatInt(rev, 10)
		return encodeStored(k, want)
	})
	if errors.Is(err, store.ErrConflict) {
		s.podChanged(ns, name)
		return nil
	}
	return err
}
