package controller

import (
	"context"
	"fmt"
	"maps"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Metadata of the RuntimeClasses knbox registers.
const (
	// BuiltinLabel marks the RuntimeClasses knbox registers for the
	// handlers that work on this host.
	BuiltinLabel = "knbox.dev/builtin"
	// IsolationLabel is "none" on a RuntimeClass whose handler does not
	// isolate its containers from the host (process), so that
	// `kubectl get runtimeclass -l knbox.dev/isolation=none` finds them.
	IsolationLabel = "knbox.dev/isolation"
	// DescriptionAnnotation says, for an operator, what such a handler
	// does not do.
	DescriptionAnnotation = "knbox.dev/description"
)

// RuntimeHandler is a handler knbox registers a RuntimeClass for.
type RuntimeHandler struct {
	Name string
	// Unisolated, when not empty, says that the handler does not isolate
	// its containers from the host, and what it lacks: the RuntimeClass
	// gets IsolationLabel "none" and the sentence as DescriptionAnnotation.
	Unisolated string
}

// RuntimeClasses reads and writes RuntimeClasses: knbox's
// kubeclient.Clientset, or client-go's typed client in tests.
type RuntimeClasses interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*nodev1.RuntimeClass, error)
	List(ctx context.Context, opts metav1.ListOptions) (*nodev1.RuntimeClassList, error)
	Create(ctx context.Context, rc *nodev1.RuntimeClass, opts metav1.CreateOptions) (*nodev1.RuntimeClass, error)
	Update(ctx context.Context, rc *nodev1.RuntimeClass, opts metav1.UpdateOptions) (*nodev1.RuntimeClass, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// RegisterRuntimeClasses makes sure a RuntimeClass named after each working
// handler exists (handler = its name), so that `kubectl get runtimeclass`
// shows what this host can run and revisions can name them. One that knbox
// registered earlier gets its labels and annotations brought up to date (a
// process RuntimeClass from a knbox that did not mark it); one of such a
// name that knbox did not register is left as it is.
func RegisterRuntimeClasses(ctx context.Context, rcs RuntimeClasses, handlers []RuntimeHandler) error {
	for _, h := range handlers {
		if err := ensureRuntimeClass(ctx, rcs, runtimeClassFor(h)); err != nil {
			return fmt.Errorf("register runtimeclass %s: %w", h.Name, err)
		}
	}
	return nil
}

func runtimeClassFor(h RuntimeHandler) *nodev1.RuntimeClass {
	rc := &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: h.Name, Labels: map[string]string{BuiltinLabel: "true"}},
		Handler:    h.Name,
	}
	if h.Unisolated != "" {
		rc.Labels[IsolationLabel] = "none"
		rc.Annotations = map[string]string{DescriptionAnnotation: h.Unisolated}
	}
	return rc
}

func ensureRuntimeClass(ctx context.Context, rcs RuntimeClasses, rc *nodev1.RuntimeClass) error {
	_, err := rcs.Create(ctx, rc, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur, err := rcs.Get(ctx, rc.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if cur.Labels[BuiltinLabel] != "true" || cur.Handler != rc.Handler {
		return nil
	}
	want := cur.DeepCopy()
	maps.Copy(want.Labels, rc.Labels)
	if rc.Labels[IsolationLabel] == "" {
		delete(want.Labels, IsolationLabel)
	}
	if want.Annotations == nil {
		want.Annotations = map[string]string{}
	}
	delete(want.Annotations, DescriptionAnnotation)
	maps.Copy(want.Annotations, rc.Annotations)
	if maps.Equal(want.Labels, cur.Labels) && maps.Equal(want.Annotations, cur.Annotations) {
		return nil
	}
	_, err = rcs.Update(ctx, want, metav1.UpdateOptions{})
	return err
}

// RemoveRuntimeClasses deletes the RuntimeClasses that knbox registered
// (BuiltinLabel) for the named handlers, runtimes the configuration does not
// enable: a process RuntimeClass left by a knbox that registered it at every
// start would otherwise still admit Revisions. Revisions that name it fail
// as for any missing handler. RuntimeClasses that knbox did not register,
// and those named otherwise than their handler, stay.
func RemoveRuntimeClasses(ctx context.Context, rcs RuntimeClasses, handlers []string) error {
	if len(handlers) == 0 {
		return nil
	}
	list, err := rcs.List(ctx, metav1.ListOptions{LabelSelector: BuiltinLabel + "=true"})
	if err != nil {
		return fmt.Errorf("list runtimeclasses: %w", err)
	}
	gone := map[string]bool{}
	for _, h := range handlers {
		gone[h] = true
	}
	for _, rc := range list.Items {
		if !gone[rc.Handler] || rc.Name != rc.Handler {
			continue
		}
		if err := rcs.Delete(ctx, rc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete runtimeclass %s of a runtime that is not enabled: %w", rc.Name, err)
		}
	}
	return nil
}
