package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/kmeta"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/apis/serving/v1alpha1"
	"github.com/knbox/knbox/pkg/kubeclient"
)

// Reasons of a Revision that waits for its Build.
const (
	// ReasonBuilding: the Build runs (or does not exist yet).
	ReasonBuilding = "Building"
	// ReasonBuildFailed: the Build failed; the Revision cannot run.
	ReasonBuildFailed = "BuildFailed"
)

var buildGVR = buildv1alpha1.SchemeGroupVersion.WithResource("builds")

// watchBuilds wakes, on every change of a Build, the Revisions of its
// namespace that wait for a build.
func (c *Controller) watchBuilds() {
	inf := kubeclient.NewDynamicInformer(c.opts.Builds, buildGVR, c.opts.Resync)
	c.builds = inf.GetStore()
	c.watch(inf, func(o metaObject) {
		revs, err := c.revisions.Revisions(o.GetNamespace()).List(everything())
		if err != nil {
			return
		}
		for _, r := range revs {
			if name, _, _ := v1alpha1.RevisionBuild(r); name == o.GetName() {
				c.enqueue(kindRevision, r.Namespace, r.Name)
			}
		}
	})
	c.buildInformer = inf
}

// awaitBuild reports whether rev may run: it has no build, or its Build
// succeeded. Otherwise it marks rev (BuildSucceeded Unknown or False,
// and Ready with it), creating the Revision's own Build from an inline
// build first.
func (c *Controller) awaitBuild(ctx context.Context, rev *servingv1.Revision) (ok bool, err error) {
	name, inline, err := v1alpha1.RevisionBuild(rev)
	if err != nil {
		c.markBuild(rev, corev1.ConditionFalse, ReasonBuildFailed, err.Error())
		return false, nil
	}
	if name == "" {
		return true, nil
	}
	if c.opts.Builds == nil {
		c.markBuild(rev, corev1.ConditionFalse, ReasonBuildFailed, "builds are not served by this knbox")
		return false, nil
	}
	b, err := c.build(rev.Namespace, name)
	if err != nil {
		return false, err
	}
	if b == nil && inline != nil {
		b, err = c.createBuild(ctx, rev, inline)
		if err != nil {
			if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsAlreadyExists(err) {
				c.markBuild(rev, corev1.ConditionFalse, ReasonBuildFailed, fmt.Sprintf("create Build %s: %v", name, err))
				return false, nil
			}
			return false, err
		}
	}
	if b == nil {
		c.markBuild(rev, corev1.ConditionUnknown, ReasonBuilding, fmt.Sprintf("waiting for Build %q, which does not exist", name))
		return false, nil
	}
	if inline != nil && !metav1.IsControlledBy(b, rev) {
		c.markBuild(rev, corev1.ConditionFalse, ReasonBuildFailed, fmt.Sprintf("Build %q exists and is not this Revision's", name))
		return false, nil
	}
	cond := b.Status.Succeeded()
	switch {
	case cond == nil || cond.IsUnknown():
		msg := fmt.Sprintf("Build %q runs", name)
		if cond != nil && cond.Message != "" {
			msg += ": " + cond.Message
		}
		c.markBuild(rev, corev1.ConditionUnknown, ReasonBuilding, msg)
		return false, nil
	case cond.IsFalse():
		c.markBuild(rev, corev1.ConditionFalse, ReasonBuildFailed, fmt.Sprintf("Build %q failed (%s): %s", name, cond.Reason, cond.Message))
		return false, nil
	}
	c.markBuild(rev, corev1.ConditionTrue, "", "")
	return true, nil
}

// markBuild sets the BuildSucceeded condition and, unless it is True, the
// conditions Ready depends on, so that Ready says the same.
func (c *Controller) markBuild(rev *servingv1.Revision, status corev1.ConditionStatus, reason, message string) {
	mgr := rev.GetConditionSet().Manage(&rev.Status)
	cond := apis.Condition{Type: v1alpha1.RevisionConditionBuildSucceeded, Status: status, Reason: reason, Message: message}
	mgr.SetCondition(cond)
	switch status {
	case corev1.ConditionUnknown:
		rev.Status.MarkResourcesAvailableUnknown(reason, message)
		rev.Status.MarkContainerHealthyUnknown(reason, message)
	case corev1.ConditionFalse:
		rev.Status.MarkResourcesAvailableFalse(reason, message)
		rev.Status.MarkContainerHealthyFalse(reason, message)
	}
}

// build reads a Build from the informer's cache (nil: none).
func (c *Controller) build(ns, name string) (*buildv1alpha1.Build, error) {
	obj, exists, err := c.builds.GetByKey(ns + "/" + name)
	if err != nil || !exists {
		return nil, err
	}
	b := &buildv1alpha1.Build{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, b); err != nil {
		return nil, fmt.Errorf("decode Build %s/%s: %w", ns, name, err)
	}
	return b, nil
}

// createBuild makes the Revision's own Build from its inline build: named
// after the Revision, owned by it (deleted with it), labelled as Knative
// labels a Revision's children.
func (c *Controller) createBuild(ctx context.Context, rev *servingv1.Revision, inline *buildv1alpha1.Build) (*buildv1alpha1.Build, error) {
	b := inline.DeepCopy()
	b.Name, b.Namespace = rev.Name, rev.Namespace
	if b.Labels == nil {
		b.Labels = map[string]string{}
	}
	for _, k := range []string{"serving.knative.dev/configuration", "serving.knative.dev/service"} {
		if v := rev.Labels[k]; v != "" {
			b.Labels[k] = v
		}
	}
	b.Labels["serving.knative.dev/revision"] = rev.Name
	b.OwnerReferences = []metav1.OwnerReference{*kmeta.NewControllerRef(rev)}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: obj}
	created, err := c.opts.Builds.Resource(buildGVR).Namespace(rev.Namespace).Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = c.opts.Builds.Resource(buildGVR).Namespace(rev.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	out := &buildv1alpha1.Build{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(created.Object, out); err != nil {
		return nil, err
	}
	c.events[revisionAgent].Eventf(rev, corev1.EventTypeNormal, "BuildCreated", "Created Build %q", out.Name)
	return out, nil
}
