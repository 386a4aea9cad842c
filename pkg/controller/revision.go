package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

func (c *Controller) reconcileRevision(ctx context.Context, ns, name string) error {
	cur, err := c.revisions.Revisions(ns).Get(name)
	if apierrors.IsNotFound(err) || err == nil && cur.DeletionTimestamp != nil {
		// The runtime first: without the autoscaler's scale a revision
		// would want its initial scale again meanwhile.
		err := c.opts.Runtime.Remove(ns, name)
		c.opts.Scaler.Delete(ns, name)
		return err
	}
	if err != nil {
		return err
	}
	rev := cur.DeepCopy()
	rev.Status.InitializeConditions()
	defer func() { rev.Status.ObservedGeneration = rev.Generation }()

	// A Revision with a build waits for it: its image is the promise of
	// the build (the seed API). Once its digests are resolved the build has
	// done its part (and may be gone).
	if !digestsResolved(rev) {
		ok, err := c.awaitBuild(ctx, rev)
		if err != nil {
			return err
		}
		if !ok {
			rev.Status.ObservedGeneration = rev.Generation
			return c.updateRevisionStatus(ctx, cur, rev)
		}
	}

	// Resolve the images to digests once, when the revision is new; every
	// instance runs those digests even if the tags move later. Like
	// Knative, one status per container, by name, in the containers' order.
	if !digestsResolved(rev) {
		statuses := make([]servingv1.ContainerStatus, 0, len(rev.Spec.Containers))
		for _, ctr := range rev.Spec.Containers {
			rctx, cancel := context.WithTimeout(ctx, c.opts.DigestResolutionTimeout)
			digest, err := c.opts.Runtime.Resolve(rctx, rev, ctr.Image)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// As Knative does, on the first failure: ContainerHealthy
				// (and so Ready) False, ContainerMissing, with Knative's
				// message and the registry's error; ResourcesAvailable
				// stays as it is, so Ready shows this message.
				rev.Status.MarkContainerHealthyFalse(servingv1.ReasonContainerMissing,
					servingv1.RevisionContainerMissingMessage(ctr.Image, "failed to resolve image to digest")+": "+err.Error())
				rev.Status.ObservedGeneration = rev.Generation
				if err := c.updateRevisionStatus(ctx, cur, rev); err != nil {
					return err
				}
				// Tried again with the queue's backoff: a registry that
				// was down or slow is not a permanent failure.
				return fmt.Errorf("resolve %s: %w", ctr.Image, err)
			}
			statuses = append(statuses, servingv1.ContainerStatus{Name: ctr.Name, ImageDigest: digest})
		}
		rev.Status.ContainerStatuses = statuses
		// Record the digests before anything runs them.
		rev.Status.ObservedGeneration = rev.Generation
		if err := c.updateRevisionStatus(ctx, cur, rev); err != nil {
			return err
		}
		return nil // the status update wakes us again with the digests
	}

	// The autoscaler first, so that the runtime finds its scale.
	c.opts.Scaler.Upsert(rev, reachable(rev))
	st, err := c.opts.Runtime.Ensure(ctx, rev)
	if err != nil {
		return err
	}
	desired, active, known := c.opts.Scaler.Scale(ns, name)
	switch {
	case st.Failed && st.ResourcesFailed:
		rev.Status.MarkResourcesAvailableFalse(st.Reason, st.Message)
	case st.Failed:
		rev.Status.MarkContainerHealthyFalse(st.Reason, st.Message)
	case st.Ready:
		rev.Status.MarkResourcesAvailableTrue()
		rev.Status.MarkContainerHealthyTrue()
	default:
		reason := st.Reason
		if reason == "" {
			reason = "Deploying"
		}
		rev.Status.MarkResourcesAvailableUnknown(reason, st.Message)
		rev.Status.MarkContainerHealthyUnknown(reason, st.Message)
	}
	if mgr := rev.GetConditionSet().Manage(&rev.Status); st.HeldReason != "" && !st.Failed {
		mgr.SetCondition(apis.Condition{Type: ConditionScaled, Status: corev1.ConditionFalse,
			Severity: apis.ConditionSeverityWarning, Reason: st.HeldReason, Message: st.HeldMessage})
	} else {
		_ = mgr.ClearCondition(ConditionScaled)
	}
	switch {
	case known && active:
		rev.Status.MarkActiveTrue()
	case known && !st.Failed:
		rev.Status.MarkActiveFalse(noTrafficReason, noTrafficMessage)
	}
	rev.Status.ActualReplicas = &st.Actual
	if known {
		rev.Status.DesiredReplicas = &desired
	}
	rev.Status.LogURL = c.logURL(ns, name)
	rev.Status.ObservedGeneration = rev.Generation
	return c.updateRevisionStatus(ctx, cur, rev)
}

// The Active condition's reason and message when a revision is inactive, as
// Knative writes them.
const (
	noTrafficReason  = "NoTraffic"
	noTrafficMessage = "The target is not receiving traffic."
)

// reachable tells whether a Route reaches rev, from the routingState label
// the Route reconciler keeps (see labelRevisions): as Knative's revision
// reconciler derives the PodAutoscaler's reachability, only "reserve" is
// unreachable; a revision not labelled yet counts as reachable.
func reachable(rev *servingv1.Revision) bool {
	return rev.GetRoutingState() != servingv1.RoutingStateReserve
}

// logURL is where the API serves a revision's logs.
func (c *Controller) logURL(ns, name string) string {
	if c.opts.APIURL == "" {
		return ""
	}
	return c.opts.APIURL + "/apis/serving.knative.dev/v1/namespaces/" + ns + "/revisions/" + name + "/log"
}

// digestsResolved tells whether every container of rev has its digest in
// status.containerStatuses.
func digestsResolved(rev *servingv1.Revision) bool {
	sts := rev.Status.ContainerStatuses
	if len(sts) != len(rev.Spec.Containers) {
		return false
	}
	for i := range sts {
		if sts[i].ImageDigest == "" {
			return false
		}
	}
	return true
}

func (c *Controller) updateRevisionStatus(ctx context.Context, cur, want *servingv1.Revision) error {
	if equality.Semantic.DeepEqual(cur.Status, want.Status) {
		return nil
	}
	_, err := c.client.ServingV1().Revisions(want.Namespace).UpdateStatus(ctx, want, metav1.UpdateOptions{})
	if err == nil {
		c.revisionReadyEvents(cur, want)
	}
	return err
}
