package admission

import (
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Limits of an Event's fields, kube-apiserver's for events with an
// eventTime (events.k8s.io's shape); legacy core Events are not held to
// them, as on a cluster.
const (
	eventReasonLimit   = 128
	eventActionLimit   = 128
	eventNoteLimit     = 1024
	eventInstanceLimit = 128
)

// eventFields names an Event's fields in one of its two shapes.
type eventFields struct {
	regarding, note string
	// strict: events.k8s.io's requirements (eventTime, reportingController,
	// reportingInstance, action, reason, type) apply.
	strict bool
}

// event is an Event in either shape, for validation.
type event struct {
	meta                               *metav1.ObjectMeta
	regarding                          corev1.ObjectReference
	reason, note, typ, action          string
	reportingController, reportingInst string
	eventTime                          metav1.MicroTime
	count                              int32
	series                             bool
}

func validateCoreEvent(e *corev1.Event) field.ErrorList {
	ev := event{meta: &e.ObjectMeta, regarding: e.InvolvedObject, reason: e.Reason, note: e.Message, typ: e.Type,
		action: e.Action, reportingController: e.ReportingController, reportingInst: e.ReportingInstance,
		eventTime: e.EventTime, count: e.Count, series: e.Series != nil}
	return validateEvent(ev, eventFields{regarding: "involvedObject", note: "message", strict: !e.EventTime.IsZero()})
}

func validateEventsEvent(e *eventsv1.Event) field.ErrorList {
	ev := event{meta: &e.ObjectMeta, regarding: e.Regarding, reason: e.Reason, note: e.Note, typ: e.Type,
		action: e.Action, reportingController: e.ReportingController, reportingInst: e.ReportingInstance,
		eventTime: e.EventTime, count: e.DeprecatedCount, series: e.Series != nil}
	return validateEvent(ev, eventFields{regarding: "regarding", note: "note", strict: true})
}

func validateEvent(e event, f eventFields) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(e.meta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if ns := e.regarding.Namespace; ns != "" && ns != e.meta.Namespace {
		errs = append(errs, field.Invalid(field.NewPath(f.regarding, "namespace"), ns, "does not match event.namespace"))
	}
	if e.count < 0 {
		errs = append(errs, field.Invalid(field.NewPath("count"), e.count, "must not be negative"))
	}
	if !f.strict {
		return errs
	}
	if e.eventTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("eventTime"), ""))
	}
	if e.typ != corev1.EventTypeNormal && e.typ != corev1.EventTypeWarning {
		errs = append(errs, field.NotSupported(field.NewPath("type"), e.typ, []string{corev1.EventTypeNormal, corev1.EventTypeWarning}))
	}
	for _, msg := range validation.IsQualifiedName(e.reportingController) {
		errs = append(errs, field.Invalid(field.NewPath("reportingController"), e.reportingController, msg))
	}
	for _, c := range []struct {
		path, v string
		limit   int
	}{
		{"reportingInstance", e.reportingInst, eventInstanceLimit},
		{"action", e.action, eventActionLimit},
		{"reason", e.reason, eventReasonLimit},
	} {
		switch {
		case c.v == "":
			errs = append(errs, field.Required(field.NewPath(c.path), ""))
		case len(c.v) > c.limit:
			errs = append(errs, field.TooLong(field.NewPath(c.path), "", c.limit))
		}
	}
	if len(e.note) > eventNoteLimit {
		errs = append(errs, field.TooLong(field.NewPath(f.note), "", eventNoteLimit))
	}
	return errs
}
