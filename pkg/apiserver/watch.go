package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/knbox/knbox/pkg/store"
)

// Watch streams last at most this long (with jitter), as kube-apiserver's
// default --min-request-timeout; clients re-watch from the last revision.
const maxWatchDuration = 30 * time.Minute

// bookmarkInterval is how often a watch that allows bookmarks may get
// one. A bookmark carries the store's progress (store.WatchProgress: the
// revision up to which the watch has been sent everything), as
// kube-apiserver's carry its watch cache's, so a client that re-watches
// resumes near the head of the log, not from where its resource last
// changed (which, for a resource that rarely changes, means reading most
// of the log from the file). One that would repeat what the client
// already knows is not sent: at rest, when nothing is written, watches
// cost no work and touch no code (a bookmark to every informer each
// minute, as a JSON encode and an HTTP/2 write on one side and a decode
// on the other, read back some 10 MiB of knbox's code that the rest had
// unmapped).
var bookmarkInterval = time.Minute

// watchEvent is the wire form of one event.
type watchEvent struct {
	Type   string      `json:"type"`
	Object interface{} `json:"object"`
}

func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request, req request) error {
	out, err := negotiate(r)
	if err != nil {
		return err
	}
	sel, err := parseSelector(r, req.kind)
	if err != nil {
		return err
	}
	if req.name != "" { // legacy /watch/.../name
		sel.fields = fields.AndSelectors(sel.fields, fields.OneTermEqualSelector("metadata.name", req.name))
	}
	q := r.URL.Query()
	var from int64
	initial := false
	switch rv := q.Get("resourceVersion"); rv {
	case "", "0":
		initial = true
	default:
		from, err = strconv.ParseInt(rv, 10, 64)
		if err != nil || from < 0 {
			return apierrors.NewBadRequest(fmt.Sprintf("resourceVersion: invalid value %q: must be a resourceVersion returned by the server", rv))
		}
	}
	sendInitial := q.Get("sendInitialEvents") == "true"
	if sendInitial {
		initial = from == 0
	}
	timeout := maxWatchDuration + time.Duration(rand.Int64N(int64(maxWatchDuration)))
	if ts := q.Get("timeoutSeconds"); ts != "" {
		n, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || n < 0 {
			return apierrors.NewBadRequest(fmt.Sprintf("timeoutSeconds: invalid value %q", ts))
		}
		if d := time.Duration(n) * time.Second; n > 0 && d < timeout {
			timeout = d
		}
	}
	bookmarks := q.Get("allowWatchBookmarks") == "true"

	ctx := r.Context()
	var ch <-chan store.Event
	if bookmarks {
		ch, err = s.store.WatchProgress(ctx, req.kind.storeResource(), req.namespace, from, initial, bookmarkInterval)
	} else {
		ch, err = s.store.Watch(ctx, req.kind.storeResource(), req.namespace, from, initial)
	}
	flusher, _ := w.(http.Flusher)
	ct := "application/json"
	if out.yaml {
		ct = "application/yaml"
	}
	if errors.Is(err, store.ErrGone) {
		// Kubernetes answers a too old resourceVersion with one ERROR
		// event carrying a 410 Status; clients relist.
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(http.StatusOK)
		st := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, s.store.Revision())).Status()
		st.Kind, st.APIVersion = "Status", "v1"
		s.writeEvent(w, out, watchEvent{Type: "ERROR", Object: st})
		return nil
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	last := from
	told := from // the last revision the client knows of
	initialDone := !initial || !sendInitial
	if initial && sendInitial {
		last = s.store.Revision()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			return nil
		case ev, ok := <-ch:
			if !ok {
				return nil // store closed or we fell behind: the client re-watches
			}
			if ev.Type == store.Progress {
				last = max(last, ev.Entry.Revision)
				if last > told || !initialDone {
					s.writeEvent(w, out, watchEvent{Type: "BOOKMARK", Object: s.bookmark(req, last, !initialDone)})
					initialDone, told = true, last
					if flusher != nil {
						flusher.Flush()
					}
				}
				continue
			}
			if !initialDone && ev.Entry.Revision > last {
				// Initial events are done once live ones start.
				s.writeEvent(w, out, watchEvent{Type: "BOOKMARK", Object: s.bookmark(req, last, true)})
				initialDone = true
			}
			if ev.Entry.Revision > last {
				last = ev.Entry.Revision
			}
			e, ok, err := s.filterEvent(req, sel, out, ev)
			if err != nil {
				s.log.Error("watch event dropped", "resource", req.kind.Resource, "err", err)
				continue
			}
			if ok {
				s.writeEvent(w, out, e)
				told = ev.Entry.Revision
			}
			if len(ch) == 0 {
				if !initialDone {
					s.writeEvent(w, out, watchEvent{Type: "BOOKMARK", Object: s.bookmark(req, last, true)})
					initialDone = true
					told = last
				}
				if flusher != nil {
					flusher.Flush()
				}
			}
		}
	}
}

// filterEvent applies the selectors (an object leaving the selection is
// DELETED for this watcher, one entering is ADDED, as Kubernetes does) and
// renders the event in the requested version and form.
func (s *Server) filterEvent(req request, sel selector, out output, ev store.Event) (watchEvent, bool, error) {
	k := req.kind
	obj, err := decodeStored(k, ev.Entry.Value)
	if err != nil {
		return watchEvent{}, false, err
	}
	now := sel.matches(k, obj)
	before := false
	switch {
	case ev.Prev != nil:
		prev, err := decodeStored(k, ev.Prev)
		if err != nil {
			return watchEvent{}, false, err
		}
		before = sel.matches(k, prev)
	case ev.PrevCompacted:
		// A replayed event whose previous state the store no longer
		// keeps: take it that it matched, so that an object leaving the
		// selection is never missed (a DELETED for an object the client
		// never had is harmless to informers).
		before = ev.Type == store.Modified || now
	}
	typ := string(ev.Type)
	switch ev.Type {
	case store.Added:
		if !now {
			return watchEvent{}, false, nil
		}
	case store.Modified:
		switch {
		case now && before:
		case now:
			typ = "ADDED"
		case before:
			typ = "DELETED"
		default:
			return watchEvent{}, false, nil
		}
	case store.Deleted:
		if !now && !before {
			return watchEvent{}, false, nil
		}
	}
	var rendered interface{}
	switch {
	case out.table != nil:
		v, err := toVersion(k, req.version, obj.DeepCopyObject())
		if err != nil {
			return watchEvent{}, false, err
		}
		rendered = s.toTable(k, []runtime.Object{v}, []runtime.Object{obj}, metav1.ListMeta{ResourceVersion: accessor(obj).ResourceVersion}, *out.table)
	default:
		v, err := toVersion(k, req.version, obj)
		if err != nil {
			return watchEvent{}, false, err
		}
		if out.partial != "" {
			rendered = partialMetadata(v, out.partial)
		} else {
			rendered = v
		}
	}
	return watchEvent{Type: typ, Object: rendered}, true, nil
}

// bookmark is the object of a BOOKMARK event: only the kind and the
// resourceVersion matter.
func (s *Server) bookmark(req request, rev int64, initialEnd bool) runtime.Object {
	var o runtime.Object
	if av := req.kind.Alt[req.version]; av != nil {
		o = av.New()
	} else {
		o = req.kind.New()
	}
	o.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Group: req.kind.Group, Version: req.version, Kind: req.kind.Kind})
	m := accessor(o)
	m.ResourceVersion = strconv.FormatInt(rev, 10)
	if initialEnd {
		m.Annotations = map[string]string{"k8s.io/initial-events-end": "true"}
	}
	return o
}

func (s *Server) writeEvent(w http.ResponseWriter, out output, e watchEvent) {
	var b []byte
	var err error
	if out.yaml {
		b, err = yaml.Marshal(e)
		b = append([]byte("---\n"), b...)
	} else {
		b, err = json.Marshal(e)
		b = append(b, '\n')
	}
	if err != nil {
		s.log.Error("encode watch event", "err", err)
		return
	}
	_, _ = w.Write(b)
}
