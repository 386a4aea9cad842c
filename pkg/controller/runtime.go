package controller

import (
	"context"

	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// Runtime is what the Revision reconciler needs from the runtime side (the
// revision manager): resolve the image to a digest once, run the Revision,
// say how it is doing, stop it.
type Runtime interface {
	// Resolve returns the digest reference (repo@sha256:...) of image, one
	// of the revision's container images (pulled with its
	// imagePullSecrets), as Knative does when a Revision is created; every
	// instance then runs that digest. The reconciler bounds it with
	// config-deployment's digest-resolution-timeout.
	Resolve(ctx context.Context, rev *servingv1.Revision, image string) (string, error)
	// Ensure makes the runtime run rev (idempotent) and returns its state.
	// It must not block on I/O.
	Ensure(ctx context.Context, rev *servingv1.Revision) (RevisionState, error)
	// Remove begins to stop every instance of a revision that no longer
	// exists (or is being deleted) and returns at once: the instances
	// drain and stop in the background (their Pods show Terminating until
	// they are gone), so that the reconciler's worker is not held for
	// their grace periods. The name is free at once for a new revision.
	Remove(namespace, name string) error
	// Subscribe registers f, called (without blocking) whenever a
	// revision's state changes, so its reconciler runs again.
	Subscribe(f func(namespace, name string))
	// Retain is told, once the reconciler has seen every Revision, which
	// exist ("namespace/name"): what an earlier run left of others (deleted
	// while knbox was down) is stopped.
	Retain(keep []string)
}

// RevisionState is what the runtime knows of a revision.
type RevisionState struct {
	// Ready: at least one instance passed its readiness probe (the
	// deployment probe of a new revision included).
	Ready bool
	// Failed: the revision cannot run (image missing, container crashing,
	// never ready within the progress deadline, unknown handler, ...).
	Failed  bool
	Reason  string // CamelCase, for conditions
	Message string
	// ResourcesFailed: the failure is of resources (handler, limits), not
	// of the container itself.
	ResourcesFailed bool
	Actual          int32 // ready instances
	// HeldReason and HeldMessage: a scale-up is held (a ResourceQuota of
	// the namespace) while the revision is Ready; shown as the Revision's
	// condition ConditionScaled, False with severity Warning.
	HeldReason, HeldMessage string
}

// ConditionScaled is the Revision condition that says a scale-up is held
// (False, severity Warning, with the reason and the quota's message); it is
// absent otherwise. It does not change Ready: the instances that run serve.
// (Knative on a cluster marks ResourcesAvailable False instead, from the
// Deployment's ReplicaFailure, and so takes a Ready revision out of
// service; knbox reports a held scale-up without doing that.)
const ConditionScaled apis.ConditionType = "Scaled"

// Scaler is the autoscaler as the Revision reconciler sees it (Knative's
// PodAutoscaler): the one owner of a revision's desired scale and of its
// Active condition.
type Scaler interface {
	// Upsert adds or updates a revision: its autoscaling annotations,
	// containerConcurrency, and whether a Route reaches it (min-scale
	// applies only then).
	Upsert(rev *servingv1.Revision, reachable bool)
	// Delete forgets a revision.
	Delete(namespace, name string)
	// Scale returns the last decision on a revision: its desired scale and
	// whether it is active; ok is false while the revision is unknown.
	Scale(namespace, name string) (desired int32, active, ok bool)
	// Subscribe registers f, called (without blocking) whenever a
	// revision's desired scale or activity changes.
	Subscribe(f func(namespace, name string))
}
