package apiserver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/knbox/knbox/pkg/apiserver"
	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

func coreEvent(name, about, reason string, last time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "serving.knative.dev/v1", Namespace: "default", Name: about},
		Reason:         reason, Message: "about " + about, Type: corev1.EventTypeNormal, Count: 1,
		FirstTimestamp: metav1.NewTime(last), LastTimestamp: metav1.NewTime(last),
		Source: corev1.EventSource{Component: "test"},
	}
}

// TestEventsBothShapes: a core Event is an events.k8s.io Event too, with
// field selectors on the object it is about, and watchable.
func TestEventsBothShapes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	evs := e.kube.CoreV1().Events("default")
	w, err := e.kube.EventsV1().Events("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := evs.Create(ctx, coreEvent("hello.1", "hello", "Created", time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := evs.Create(ctx, coreEvent("other.1", "other", "Created", time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		got, ok := ev.Object.(*eventsv1.Event)
		if ev.Type != watch.Added || !ok || got.Regarding.Name != "hello" || got.Note != "about hello" {
			t.Fatalf("watch event %s %#v", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event")
	}
	sel := fields.Set{"involvedObject.name": "hello", "involvedObject.kind": "Service"}.AsSelector().String()
	list, err := evs.List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "hello.1" {
		t.Fatalf("events about hello: %+v", list.Items)
	}
	nev, err := e.kube.EventsV1().Events("default").Get(ctx, "hello.1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nev.Regarding.Name != "hello" || nev.Reason != "Created" || nev.DeprecatedCount != 1 {
		t.Fatalf("events.k8s.io shape: %+v", nev)
	}
	// Created in the new shape, read in the old.
	now := metav1.NewMicroTime(time.Now())
	_, err = e.kube.EventsV1().Events("default").Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "new.1"}, EventTime: now, ReportingController: "example.com/ctl", ReportingInstance: "i",
		Action: "Run", Reason: "Started", Regarding: corev1.ObjectReference{Kind: "Revision", Name: "r"}, Note: "n", Type: corev1.EventTypeWarning,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old, err := evs.Get(ctx, "new.1", metav1.GetOptions{})
	if err != nil || old.InvolvedObject.Name != "r" || old.Message != "n" || old.ReportingController != "example.com/ctl" {
		t.Fatalf("core shape: %+v, %v", old, err)
	}
	// Patched in the new shape, read in the old.
	if _, err := e.kube.EventsV1().Events("default").Patch(ctx, "new.1", types.MergePatchType, []byte(`{"note":"patched"}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if old, err := evs.Get(ctx, "new.1", metav1.GetOptions{}); err != nil || old.Message != "patched" {
		t.Fatalf("patched note as message: %+v, %v", old, err)
	}
	// events.k8s.io's requirements, and a namespace that does not match.
	_, err = e.kube.EventsV1().Events("default").Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "bad"}}, metav1.CreateOptions{})
	assertInvalid(t, err, "eventTime")
	bad := coreEvent("bad", "x", "R", time.Now())
	bad.InvolvedObject.Namespace = "elsewhere"
	_, err = evs.Create(ctx, bad, metav1.CreateOptions{})
	assertInvalid(t, err, "involvedObject.namespace")
	if _, err := evs.List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.color=red"}); !apierrors.IsBadRequest(err) {
		t.Errorf("unknown field selector: %v, want 400", err)
	}
}

// TestEventsBounded: Events past their TTL go, and a namespace keeps at
// most its cap, the least recently seen going first.
func TestEventsBounded(t *testing.T) {
	api := apiservertest.StartWith(t, apiservertest.Options{User: "alice@example.com", Server: func(o *apiserver.Options) {
		o.Limits.EventTTL = 2 * time.Second
		o.Limits.MaxEventsPerNamespace = 3
	}})
	e := startEnvFrom(t, api)
	ctx := context.Background()
	evs := e.kube.CoreV1().Events("default")
	base := time.Now()
	for i := range 5 {
		if _, err := evs.Create(ctx, coreEvent(fmt.Sprint("e", i), "x", "R", base.Add(time.Duration(i)*time.Millisecond)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	names := func() []string {
		l, err := evs.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, ev := range l.Items {
			ns = append(ns, ev.Name)
		}
		return ns
	}
	eventually(t, 30*time.Second, "the namespace's events cut to 3", func() bool {
		n := names()
		return len(n) == 3 && n[0] == "e2" && n[2] == "e4"
	})
	eventually(t, 30*time.Second, "the events to expire", func() bool { return len(names()) == 0 })
}

// TestEventsCountedByClientGoRecorder: client-go's recorder creates an
// Event once and then patches its count, which the server accepts.
func TestEventsCountedByClientGoRecorder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cm, err := e.kube.CoreV1().ConfigMaps("default").Create(ctx, configMap("default", "about", "1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := record.NewBroadcaster()
	defer b.Shutdown()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.kube.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "test"})
	for range 3 {
		rec.Event(cm, corev1.EventTypeWarning, "Again", "the same thing")
	}
	eventually(t, 30*time.Second, "one event counted 3 times", func() bool {
		l, err := e.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=about"})
		return err == nil && len(l.Items) == 1 && l.Items[0].Count == 3 && l.Items[0].InvolvedObject.UID == cm.UID
	})
}

// TestEventsRBAC: Events are authorized as any kind: alice, who may edit
// team-a, writes and reads its Events (core, as kube's edit role allows)
// and not team-b's; carol, bound to nothing, reads none.
func TestEventsRBAC(t *testing.T) {
	e := newAuthEnv(t, nil)
	ctx := context.Background()
	ev := coreEvent("a.1", "x", "R", time.Now())
	ev.Namespace, ev.InvolvedObject.Namespace = "team-a", "team-a"
	alice := e.kube(aliceToken)
	if _, err := alice.CoreV1().Events("team-a").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatalf("alice creates an event in team-a: %v", err)
	}
	if _, err := alice.CoreV1().Events("team-a").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Errorf("alice lists team-a's events: %v", err)
	}
	if _, err := alice.CoreV1().Events("team-b").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice lists team-b's events: %v, want 403", err)
	}
	if _, err := alice.EventsV1().Events("team-b").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice lists team-b's events.k8s.io events: %v, want 403", err)
	}
	if _, err := e.kube(carolToken).CoreV1().Events("team-a").Get(ctx, "a.1", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("carol reads an event: %v, want 403", err)
	}
}
