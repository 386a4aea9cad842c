package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

func (c *Controller) reconcileRevision(ctx context.Context, ns, name string) error {
	cur, err := c.revisions.Revisions(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return c.opts.Runtime.Remove(ctx, ns, name)
	}
	if err != nil {
		return err
	}
	if cur.DeletionTimestamp != nil {
		return c.opts.Runtime.Remove(ctx, ns, name)
	}
	rev := cur.DeepCopy()
	rev.Status.InitializeConditions()
	defer func() { rev.Status.ObservedGeneration = rev.Generation }()

	// Resolve the images to digests once, when the revision is new; every
	// instance runs those digests even if the tags move later. Like
	// Knative, one status per container, by name, in the containers' order.
	if !digestsResolved(rev) {
		statuses := make([]servingv1.ContainerStatus, 0, len(rev.Spec.Containers))
		for _, ctr := range rev.Spec.Containers {
			digest, err := c.opts.Runtime.Resolve(ctx, rev, ctr.Image)
			if err != nil {
				rev.Status.MarkContainerHealthyFalse(servingv1.ReasonContainerMissing,
					servingv1.RevisionContainerMissingMessage(ctr.Image, err.Error()))
				rev.Status.MarkResourcesAvailableFalse(servingv1.ReasonContainerMissing, "the image could not be resolved")
				rev.Status.ObservedGeneration = rev.Generation
				return c.updateRevisionStatus(ctx, cur, rev)
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

	st, err := c.opts.Runtime.Ensure(ctx, rev)
	if err != nil {
		return err
	}
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
	switch {
	case st.Active:
		rev.Status.MarkActiveTrue()
	case !st.Failed:
		rev.Status.MarkActiveFalse("NoTraffic", "The target is not receiving traffic.")
	}
	rev.Status.ActualReplicas = &st.Actual
	rev.Status.DesiredReplicas = &st.Desired
	rev.Status.LogURL = st.LogURL
	rev.Status.ObservedGeneration = rev.Generation
	return c.updateRevisionStatus(ctx, cur, rev)
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
	return err
}
