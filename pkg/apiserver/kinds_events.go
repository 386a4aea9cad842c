package apiserver

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// eventKinds are core/v1 Event and events.k8s.io/v1 Event: one set of
// objects, stored as core Events (as on a cluster), served in both shapes.
func eventKinds() []*Kind {
	core := &Kind{
		Group: "", Version: "v1", Kind: "Event", Resource: "events", Singular: "event", Namespaced: true,
		ShortNames: []string{"ev"},
		New:        func() runtime.Object { return &corev1.Event{} }, NewList: func() runtime.Object { return &corev1.EventList{} },
		Columns: eventColumns(),
		Row: func(o runtime.Object) []interface{} {
			e := o.(*corev1.Event)
			return eventRow(e)
		},
		FieldLabels: coreEventFields(),
	}
	fields := map[string]func(runtime.Object) string{}
	for f, get := range coreEventFields() {
		fields[f] = func(o runtime.Object) string { return get(eventToCore(o.(*eventsv1.Event))) }
	}
	for f, core := range map[string]string{
		"regarding.kind": "involvedObject.kind", "regarding.namespace": "involvedObject.namespace",
		"regarding.name": "involvedObject.name", "regarding.uid": "involvedObject.uid",
		"regarding.apiVersion": "involvedObject.apiVersion", "regarding.fieldPath": "involvedObject.fieldPath",
		"reportingController": "reportingComponent",
	} {
		fields[f] = fields[core]
	}
	events := &Kind{
		Group: "events.k8s.io", Version: "v1", Kind: "Event", Resource: "events", Singular: "event", Namespaced: true,
		ShortNames: []string{"ev"},
		New:        func() runtime.Object { return &eventsv1.Event{} }, NewList: func() runtime.Object { return &eventsv1.EventList{} },
		Columns: eventColumns(),
		Row: func(o runtime.Object) []interface{} {
			return eventRow(eventToCore(o.(*eventsv1.Event)))
		},
		FieldLabels: fields,
		StoreAs: &StoreAs{Kind: core,
			To:   func(o runtime.Object) (runtime.Object, error) { return eventToCore(o.(*eventsv1.Event)), nil },
			From: func(o runtime.Object) (runtime.Object, error) { return eventFromCore(o.(*corev1.Event)), nil },
		},
	}
	return []*Kind{core, events}
}

// coreEventFields are the field selectors of core Events (kube-apiserver's).
func coreEventFields() map[string]func(runtime.Object) string {
	ev := func(f func(*corev1.Event) string) func(runtime.Object) string {
		return func(o runtime.Object) string { return f(o.(*corev1.Event)) }
	}
	return map[string]func(runtime.Object) string{
		"involvedObject.kind":            ev(func(e *corev1.Event) string { return e.InvolvedObject.Kind }),
		"involvedObject.namespace":       ev(func(e *corev1.Event) string { return e.InvolvedObject.Namespace }),
		"involvedObject.name":            ev(func(e *corev1.Event) string { return e.InvolvedObject.Name }),
		"involvedObject.uid":             ev(func(e *corev1.Event) string { return string(e.InvolvedObject.UID) }),
		"involvedObject.apiVersion":      ev(func(e *corev1.Event) string { return e.InvolvedObject.APIVersion }),
		"involvedObject.resourceVersion": ev(func(e *corev1.Event) string { return e.InvolvedObject.ResourceVersion }),
		"involvedObject.fieldPath":       ev(func(e *corev1.Event) string { return e.InvolvedObject.FieldPath }),
		"reason":                         ev(func(e *corev1.Event) string { return e.Reason }),
		"reportingComponent":             ev(func(e *corev1.Event) string { return e.ReportingController }),
		"source":                         ev(func(e *corev1.Event) string { return e.Source.Component }),
		"type":                           ev(func(e *corev1.Event) string { return e.Type }),
	}
}

// eventColumns are kubectl's columns for Events (Name and Age, which every
// kind's table has, only with -o wide).
func eventColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Priority: 1, Description: "Name of the object"},
		col("Last Seen", "string", "The time the event was last seen"),
		col("Type", "string", "Normal or Warning"),
		col("Reason", "string", "Why the event happened, machine-readable"),
		col("Object", "string", "The object the event is about"),
		col("Message", "string", "What happened, for a human"),
		{Name: "Age", Type: "string", Priority: 1, Description: "Time since creation"},
	}
}

func eventRow(e *corev1.Event) []interface{} {
	last := "<unknown>"
	if t := eventTime(e); !t.IsZero() {
		last = duration.HumanDuration(time.Since(t))
	}
	obj := strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name
	return []interface{}{last, e.Type, e.Reason, obj, strings.TrimSpace(e.Message)}
}

// eventTime is when an Event was last seen: its series' last observation,
// last timestamp, event time, or creation, the first set.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// eventToCore and eventFromCore convert between the two shapes of an
// Event, field for field as kube-apiserver does (events.k8s.io's
// regarding, note and deprecated* are core's involvedObject, message and
// timestamps).
func eventToCore(in *eventsv1.Event) *corev1.Event {
	out := &corev1.Event{
		ObjectMeta:          *in.ObjectMeta.DeepCopy(),
		InvolvedObject:      in.Regarding,
		Reason:              in.Reason,
		Message:             in.Note,
		Source:              in.DeprecatedSource,
		FirstTimestamp:      in.DeprecatedFirstTimestamp,
		LastTimestamp:       in.DeprecatedLastTimestamp,
		Count:               in.DeprecatedCount,
		Type:                in.Type,
		EventTime:           in.EventTime,
		Action:              in.Action,
		Related:             in.Related.DeepCopy(),
		ReportingController: in.ReportingController,
		ReportingInstance:   in.ReportingInstance,
	}
	if in.Series != nil {
		out.Series = &corev1.EventSeries{Count: in.Series.Count, LastObservedTime: in.Series.LastObservedTime}
	}
	out.APIVersion, out.Kind = "v1", "Event"
	return out
}

func eventFromCore(in *corev1.Event) *eventsv1.Event {
	out := &eventsv1.Event{
		ObjectMeta:               *in.ObjectMeta.DeepCopy(),
		EventTime:                in.EventTime,
		ReportingController:      in.ReportingController,
		ReportingInstance:        in.ReportingInstance,
		Action:                   in.Action,
		Reason:                   in.Reason,
		Regarding:                in.InvolvedObject,
		Related:                  in.Related.DeepCopy(),
		Note:                     in.Message,
		Type:                     in.Type,
		DeprecatedSource:         in.Source,
		DeprecatedFirstTimestamp: in.FirstTimestamp,
		DeprecatedLastTimestamp:  in.LastTimestamp,
		DeprecatedCount:          in.Count,
	}
	if in.Series != nil {
		out.Series = &eventsv1.EventSeries{Count: in.Series.Count, LastObservedTime: in.Series.LastObservedTime}
	}
	out.APIVersion, out.Kind = "events.k8s.io/v1", "Event"
	return out
}
