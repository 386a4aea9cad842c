package controller

import (
	"context"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// Runtime is what the Revision reconciler needs from the runtime: resolve
// the image to a digest once, run the Revision, say how it is doing, stop
// it. The runtime issue implements it over real containers; tests use a
// fake.
type Runtime interface {
	// Resolve returns the digest reference (repo@sha256:...) of image, one
	// of the revision's container images (pulled with its
	// imagePullSecrets), as Knative does when a Revision is created; every
	// instance then runs that digest.
	Resolve(ctx context.Context, rev *servingv1.Revision, image string) (string, error)
	// Ensure makes the runtime run rev (idempotent) and returns its state.
	Ensure(ctx context.Context, rev *servingv1.Revision) (RevisionState, error)
	// Remove stops every instance of a revision that no longer exists.
	Remove(ctx context.Context, namespace, name string) error
	// Subscribe registers f, called (without blocking) whenever a
	// revision's state changes, so its reconciler runs again.
	Subscribe(f func(namespace, name string))
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
	Desired         int32 // instances wanted
	// Active: the revision has instances or is being scaled up; false
	// after scale to zero for lack of traffic.
	Active bool
	LogURL string
}
