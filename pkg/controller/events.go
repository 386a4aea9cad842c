package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingscheme "knative.dev/serving/pkg/client/clientset/versioned/scheme"
)

// Events are what Knative Serving's reconcilers record, with the same
// reasons and messages: a Service's Configuration and Route created, a
// Configuration's Revision created, the Configuration ready and its latest
// ready Revision updated, a Revision ready. knbox adds a Warning when a
// Revision fails, with the reason of its Ready condition (ContainerMissing,
// ExitCode1, ProgressDeadlineExceeded, ...), which Knative shows only in the
// condition.

// Component names of the recorders, as Knative's controllers name
// themselves.
const (
	serviceAgent       = "service-controller"
	configurationAgent = "configuration-controller"
	revisionAgent      = "revision-controller"
)

// recorders are the event recorders of the reconcilers, by component.
type recorders map[string]record.EventRecorder

func newRecorders(mk func(component string) record.EventRecorder) recorders {
	rs := recorders{}
	for _, c := range []string{serviceAgent, configurationAgent, revisionAgent} {
		if mk == nil {
			rs[c] = nopRecorder{}
		} else {
			rs[c] = mk(c)
		}
	}
	return rs
}

// Recorders makes the recorders of Options.Recorder from a broadcaster:
// each names its component as the source of its events.
func Recorders(b record.EventBroadcaster) func(component string) record.EventRecorder {
	return func(component string) record.EventRecorder {
		return b.NewRecorder(servingscheme.Scheme, corev1.EventSource{Component: component})
	}
}

// nopRecorder drops events: a Controller built without Options.Recorder.
type nopRecorder struct{}

func (nopRecorder) Event(runtime.Object, string, string, string)                  {}
func (nopRecorder) Eventf(runtime.Object, string, string, string, ...interface{}) {}
func (nopRecorder) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...interface{}) {
}

// revisionReadyEvents records a Revision's Ready condition turning true
// (Knative's RevisionReady) or false (a Warning with its reason).
func (c *Controller) revisionReadyEvents(before, after *servingv1.Revision) {
	was, now := before.Status.GetCondition(apis.ConditionReady), after.Status.GetCondition(apis.ConditionReady)
	rec := c.events[revisionAgent]
	switch {
	case now.IsTrue() && !was.IsTrue():
		rec.Event(after, corev1.EventTypeNormal, "RevisionReady", "Revision becomes ready upon all resources being ready")
	case now.IsFalse() && (!was.IsFalse() || was.Reason != now.Reason):
		reason := now.Reason
		if reason == "" {
			reason = "RevisionFailed"
		}
		rec.Event(after, corev1.EventTypeWarning, reason, fmt.Sprintf("Revision did not become ready: %s", now.Message))
	}
}

// configurationEvents records what Knative's configuration reconciler does
// when the status changes: the first ready Revision, a new latest ready
// one, the latest created one failing.
func (c *Controller) configurationEvents(before, after *servingv1.Configuration) {
	rec := c.events[configurationAgent]
	if after.Status.LatestReadyRevisionName != "" && after.Status.LatestReadyRevisionName != before.Status.LatestReadyRevisionName {
		if before.Status.LatestReadyRevisionName == "" {
			rec.Event(after, corev1.EventTypeNormal, "ConfigurationReady", "Configuration becomes ready")
		}
		rec.Eventf(after, corev1.EventTypeNormal, "LatestReadyUpdate", "LatestReadyRevisionName updated to %q", after.Status.LatestReadyRevisionName)
	}
	was, now := before.Status.GetCondition(apis.ConditionReady), after.Status.GetCondition(apis.ConditionReady)
	if now.IsFalse() && !was.IsFalse() && after.Status.LatestCreatedRevisionName != "" {
		if after.Status.LatestCreatedRevisionName == after.Status.LatestReadyRevisionName {
			rec.Eventf(after, corev1.EventTypeWarning, "LatestReadyFailed", "Latest ready revision %q has failed", after.Status.LatestCreatedRevisionName)
		} else {
			rec.Eventf(after, corev1.EventTypeWarning, "LatestCreatedFailed", "Latest created revision %q has failed", after.Status.LatestCreatedRevisionName)
		}
	}
}
