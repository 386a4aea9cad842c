package replicas

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/knbox/knbox/pkg/pod"
)

// eventLog collects Options.Event's events as "Type Reason message".
type eventLog struct {
	mu  sync.Mutex
	evs []string
}

func (l *eventLog) record(about corev1.ObjectReference, typ, reason, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, fmt.Sprintf("%s/%s[%s] %s %s %s", about.Kind, about.Name, about.UID, typ, reason, message))
}

func (l *eventLog) await(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		l.mu.Lock()
		evs := slices.Clone(l.evs)
		l.mu.Unlock()
		missing := ""
		for _, w := range want {
			if !slices.ContainsFunc(evs, func(e string) bool { return strings.Contains(e, w) }) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event %q in:\n%s", missing, strings.Join(evs, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInstanceEvents: an instance's making is told about its Revision, its
// life (the pod runtime's events, named as the kubelet names them) about
// its Pod, by the name and UID the Pod has.
func TestInstanceEvents(t *testing.T) {
	requireHandler(t, "runc")
	ref := busyboxImage(t)
	var (
		log eventLog
		mgr atomic.Pointer[Manager]
	)
	e := newEnv(t, []string{"runc"}, withOptions(func(o *Options) { o.Event = log.record }),
		withPodOptions(func(o *pod.Options) {
			o.Events = func(ev pod.Event) {
				if m := mgr.Load(); m != nil {
					m.PodEvent(ev)
				}
			}
		}))
	mgr.Store(e.m)
	e.synced()
	name := uniqueName("events")
	rev := newRev(t, "ns1", name, "runc", ref, shell("exec httpd -f -p 8080"))
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", ready)
	pods := e.m.Pods()
	if len(pods) != 1 {
		t.Fatalf("%d pods, want 1", len(pods))
	}
	p := "Pod/" + pods[0].Name + "[" + string(pods[0].UID) + "]"
	if pods[0].UID != PodUID("ns1", pods[0].Annotations[AnnotationInstance]) {
		t.Errorf("pod UID %s, want PodUID's", pods[0].UID)
	}
	log.await(t, "Revision/"+name+"["+string(rev.UID)+"] Normal Created Created instance "+name+"-",
		p+" Normal Pulling ", p+" Normal Pulled ", p+" Normal Created Created container user-container",
		p+" Normal Started Started container user-container")
	e.scale.set("ns1", name, 0)
	log.await(t, p+" Normal Killing ")

	crash := uniqueName("crash")
	rev = newRev(t, "ns1", crash, "runc", ref, shell("echo bye; exit 3"))
	e.resolveAndEnsure(rev)
	log.await(t, "Pod/"+crash+"-deployment-", " Warning BackOff ")
	log.mu.Lock()
	t.Logf("events:\n%s", strings.Join(log.evs, "\n"))
	log.mu.Unlock()
}
