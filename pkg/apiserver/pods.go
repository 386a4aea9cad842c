package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/util/workqueue"

	"github.com/knbox/knbox/pkg/store"
)

// PodSource is the runtime side's instances seen as core/v1 Pods (package
// replicas' Manager, adapted by the daemon): the API mirrors them.
type PodSource interface {
	// Pods returns every instance as a Pod. A Pod's UID, when set, is the
	// one it is stored with (the source's events name it); unset, the
	// mirror gives it one.
	Pods() []*corev1.Pod
	// Pod returns one instance; false once it is gone.
	Pod(namespace, name string) (*corev1.Pod, bool)
	// DeletePod stops one instance gracefully, in the background (its
	// Revision replaces it). Idempotent.
	DeletePod(namespace, name string) error
	// OwnerGone stops one instance gracefully, in the background, because
	// its owner (of UID owner, the Revision) is gone or going: nothing
	// replaces it, as on a cluster a ReplicaSet that is deleted makes no
	// more pods. Idempotent.
	OwnerGone(namespace, name string, owner types.UID) error
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
// or their Pods are removed and made again (with new UIDs, unless the
// source sets them).
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
		if err == nil && s.ownersInFlux(ns, obj.(*corev1.Pod).OwnerReferences) {
			// An owner deleted in the foreground waits for its Pods.
			s.gc.Add(gcKey)
		}
		return err
	case !stored:
		if err := s.checkNamespace(k, ns, name); err != nil {
			// No Pods in a namespace that is gone or going: its
			// instances are being stopped with their Revisions.
			return nil
		}
		if want.UID == "" { // the source names none: a UID of the API's
			want.UID = uuid.NewUUID()
		}
		want.Finalizers = []string{PodFinalizer}
		want.DeletionTimestamp, want.DeletionGracePeriodSeconds = nil, nil
		_, err := s.store.Create(s.key(k, ns, name), func(rev int64) ([]byte, error) {
			want.ResourceVersion = strconv.FormatInt(rev, 10)
			return encodeStored(k, want)
		})
		if errors.Is(err, store.ErrExists) {
			s.podChanged(ns, name)
			return nil
		}
		if err == nil && s.ownersInFlux(ns, want.OwnerReferences) {
			s.gc.Add(gcKey) // its owner is gone already, or going
		}
		return err
	}
	cur := obj.(*corev1.Pod)
	if cur.DeletionTimestamp != nil && !(want.DeletionTimestamp != nil && cur.DeletionTimestamp.Equal(want.DeletionTimestamp)) {
		// Deleted by a user (kubectl delete pod): the instance is
		// replaced. Deleted with its owner (the garbage collector
		// deleting the Pods of a deleted Revision): it is not.
		stop := func() error { return s.pods.DeletePod(ns, name) }
		if ref := metav1.GetControllerOf(cur); ref != nil && !s.ownerLive(ns, *ref) {
			stop = func() error { return s.pods.OwnerGone(ns, name, ref.UID) }
		}
		if err := stop(); err != nil {
			return fmt.Errorf("stop instance: %w", err)
		}
		if again, ok := s.pods.Pod(ns, name); ok {
			want = again
		}
	}
	want.ObjectMeta.UID = cur.UID
	want.CreationTimestamp = cur.CreationTimestamp
	if cur.DeletionTimestamp != nil || want.DeletionTimestamp == nil {
		// A delete through the API is kept; else the instance says it
		// stops (a scale-down).
		want.DeletionTimestamp, want.DeletionGracePeriodSeconds = cur.DeletionTimestamp, cur.DeletionGracePeriodSeconds
	}
	want.Finalizers = cur.Finalizers
	want.ResourceVersion = cur.ResourceVersion
	want.Generation = cur.Generation
	want.ManagedFields = cur.ManagedFields
	want.TypeMeta = cur.TypeMeta
	if equality.Semantic.DeepEqual(want, cur) {
		return nil
	}
	_, err = s.storeUpdate(s.key(k, ns, name), entry.Revision, want.DeletionTimestamp != nil, func(rev int64) ([]byte, error) {
		want.ResourceVersion = strconv.FormatInt(rev, 10)
		return encodeStored(k, want)
	})
	if errors.Is(err, store.ErrConflict) {
		s.podChanged(ns, name)
		return nil
	}
	return err
}

// PodLogOptions are the query parameters of pods/{name}/log, checked.
type PodLogOptions struct {
	// Container is the container whose output to read (checked against the
	// Pod's containers).
	Container  string
	Follow     bool
	Previous   bool
	Timestamps bool
	// Since is the time of the first line (zero: from the start).
	Since time.Time
	// TailLines, if not nil, is how many of the last lines to write.
	TailLines *int64
	// LimitBytes, if not nil, ends the response after that many bytes.
	LimitBytes *int64
}

// ErrNoPreviousContainer is what PodLogs returns when Previous asks for a
// run that did not end.
var ErrNoPreviousContainer = errors.New("no previous terminated container")

// parsePodLogOptions reads pods/log's query as the kubelet does, with
// kube-apiserver's validation (ValidatePodLogOptions).
func parsePodLogOptions(q url.Values, now time.Time) (PodLogOptions, error) {
	var o PodLogOptions
	bad := func(field, v, why string) error {
		return apierrors.NewBadRequest(fmt.Sprintf("%s: invalid value %q: %s", field, v, why))
	}
	for k, vs := range q {
		if len(vs) > 1 {
			return o, bad(k, strings.Join(vs, ","), "given more than once")
		}
	}
	boolean := func(name string, dst *bool) error {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad(name, v, "must be true or false")
		}
		*dst = b
		return nil
	}
	if err := errors.Join(boolean("follow", &o.Follow), boolean("previous", &o.Previous), boolean("timestamps", &o.Timestamps)); err != nil {
		return o, err
	}
	o.Container = q.Get("container")
	if len(o.Container) > 253 {
		return o, bad("container", o.Container[:64]+"...", "must be no more than 253 characters")
	}
	integer := func(name string, min int64) (*int64, error) {
		v := q.Get(name)
		if v == "" {
			return nil, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < min {
			return nil, bad(name, v, fmt.Sprintf("must be an integer of at least %d", min))
		}
		return &n, nil
	}
	var err error
	if o.TailLines, err = integer("tailLines", 0); err != nil {
		return o, err
	}
	if o.LimitBytes, err = integer("limitBytes", 1); err != nil {
		return o, err
	}
	secs, err := integer("sinceSeconds", 1)
	if err != nil {
		return o, err
	}
	st := q.Get("sinceTime")
	if secs != nil && st != "" {
		return o, bad("sinceTime", st, "at most one of sinceSeconds or sinceTime may be specified")
	}
	if secs != nil {
		// Bounded: a huge value means from the start.
		o.Since = now.Add(-time.Duration(min(*secs, int64(100*365*24*3600))) * time.Second)
	}
	if st != "" {
		t, err := time.Parse(time.RFC3339, st)
		if err != nil {
			return o, bad("sinceTime", st, "must be an RFC 3339 time")
		}
		o.Since = t
	}
	return o, nil
}

// handlePodLog streams one container's output of a Pod (its instance).
func (s *Server) handlePodLog(w http.ResponseWriter, r *http.Request, req request) error {
	obj, _, err := s.getStored(req.kind, req.namespace, req.name)
	if err != nil {
		return err
	}
	p := obj.(*corev1.Pod)
	opts, err := parsePodLogOptions(r.URL.Query(), time.Now())
	if err != nil {
		return err
	}
	if opts.Container, err = podContainer(p, opts.Container); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if opts.Follow {
		// A follow ends with the instance, as with its container on a
		// cluster.
		go s.cancelWhenGone(ctx, cancel, req.namespace, req.name, p.UID)
	}
	var out io.Writer = w
	flushed := false
	lw := &lazyHeader{w: w, start: func() {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		flushed = true
	}}
	out = lw
	if f, ok := w.(http.Flusher); ok {
		out = flushWriter{w: lw, f: f}
	}
	if opts.LimitBytes != nil {
		out = &limitWriter{w: out, left: *opts.LimitBytes, cancel: cancel}
	}
	if opts.Follow && !opts.Previous {
		lw.begin() // headers at once: kubectl waits for them
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	err = s.opts.PodLogs(ctx, out, p, opts)
	switch {
	case errors.Is(err, ErrNoPreviousContainer) && !flushed:
		return apierrors.NewBadRequest(fmt.Sprintf("previous terminated container %q in pod %q not found", opts.Container, p.Name))
	case err != nil && !flushed:
		return err
	case err != nil && ctx.Err() == nil:
		s.log.Warn("streaming pod logs", "namespace", req.namespace, "pod", req.name, "err", err)
	}
	lw.begin()
	return nil
}

// podContainer checks the container named for a Pod's subresource, or
// picks the only one.
func podContainer(p *corev1.Pod, name string) (string, error) {
	var names []string
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return name, nil
		}
		names = append(names, c.Name)
	}
	switch {
	case name == "" && len(names) == 1:
		return names[0], nil
	case name == "":
		return "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: %v", p.Name, names))
	}
	return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, p.Name))
}

// cancelWhenGone calls cancel once the Pod namespace/name (of uid) is gone
// or ctx ends.
func (s *Server) cancelWhenGone(ctx context.Context, cancel func(), namespace, name string, uid types.UID) {
	k := s.kinds.Lookup("", "pods")
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		obj, _, err := s.getStored(k, namespace, name)
		if apierrors.IsNotFound(err) || err == nil && accessor(obj).UID != uid {
			cancel()
			return
		}
	}
}

// lazyHeader writes the 200 header before the first byte of the body, so
// an error found before any output is still answered as a Status.
type lazyHeader struct {
	w       http.ResponseWriter
	start   func()
	started bool
}

func (l *lazyHeader) begin() {
	if !l.started {
		l.started = true
		l.start()
	}
}

func (l *lazyHeader) Write(p []byte) (int, error) {
	l.begin()
	return l.w.Write(p)
}

// limitWriter writes at most left bytes, then ends the stream.
type limitWriter struct {
	w      io.Writer
	left   int64
	cancel func()
}

var errLimitReached = errors.New("limitBytes reached")

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.left <= 0 {
		l.cancel()
		return 0, errLimitReached
	}
	n := len(p)
	if int64(n) > l.left {
		p = p[:l.left]
	}
	m, err := l.w.Write(p)
	l.left -= int64(m)
	if err == nil && m < n {
		l.cancel()
		err = errLimitReached
	}
	return m, err
}
