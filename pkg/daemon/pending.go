package daemon

import (
	"context"
	"strings"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/controller"
)

// pendingRuntime stands in until the container runtime is wired in: it
// records the image reference as given and reports every revision as not
// yet deployable, with a reason that says so, instead of pretending.
type pendingRuntime struct{}

func (pendingRuntime) Resolve(_ context.Context, rev *servingv1.Revision) (string, error) {
	img := rev.Spec.Containers[0].Image
	if !strings.Contains(img, "@") {
		img += "@unresolved"
	}
	return img, nil
}

func (pendingRuntime) Ensure(context.Context, *servingv1.Revision) (controller.RevisionState, error) {
	return controller.RevisionState{Reason: "RuntimeNotAvailable", Message: "this knbox build cannot run containers yet", Desired: 1}, nil
}

func (pendingRuntime) Remove(context.Context, string, string) error { return nil }

func (pendingRuntime) Subscribe(func(string, string)) {}
