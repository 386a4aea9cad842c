package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/kmeta"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/apis/serving/v1alpha1"
)

// childAnnotations are the Service's annotations its Configuration and
// Route carry (Knative leaves out kubectl's last-applied copy).
func childAnnotations(svc *servingv1.Service) map[string]string {
	out := map[string]string{}
	for k, v := range svc.Annotations {
		if k == corev1.LastAppliedConfigAnnotation || k == v1alpha1.ModeAnnotation || k == v1alpha1.V1TrafficAnnotation {
			continue
		}
		out[k] = v
	}
	return out
}

func childLabels(svc *servingv1.Service) map[string]string {
	out := map[string]string{}
	for k, v := range svc.Labels {
		out[k] = v
	}
	out[serving.ServiceLabelKey] = svc.Name
	out[serving.ServiceUIDLabelKey] = string(svc.UID)
	return out
}

func desiredConfiguration(svc *servingv1.Service) *servingv1.Configuration {
	return &servingv1.Configuration{
		ObjectMeta: metav1.ObjectMeta{
			Name: svc.Name, Namespace: svc.Namespace,
			Labels: childLabels(svc), Annotations: childAnnotations(svc),
			OwnerReferences: []metav1.OwnerReference{*kmeta.NewControllerRef(svc)},
		},
		Spec: *svc.Spec.ConfigurationSpec.DeepCopy(),
	}
}

func desiredRoute(svc *servingv1.Service) *servingv1.Route {
	rt := &servingv1.Route{
		ObjectMeta: metav1.ObjectMeta{
			Name: svc.Name, Namespace: svc.Namespace,
			Labels: childLabels(svc), Annotations: childAnnotations(svc),
			OwnerReferences: []metav1.OwnerReference{*kmeta.NewControllerRef(svc)},
		},
	}
	for _, t := range svc.Spec.RouteSpec.Traffic {
		t := *t.DeepCopy()
		// "latest" targets follow the Service's own Configuration.
		if t.LatestRevision != nil && *t.LatestRevision {
			t.ConfigurationName = svc.Name
		}
		rt.Spec.Traffic = append(rt.Spec.Traffic, t)
	}
	return rt
}

func (c *Controller) reconcileService(ctx context.Context, ns, name string) error {
	cur, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil // its Configuration and Route go with it (ownerReferences)
	}
	if err != nil {
		return err
	}
	if cur.DeletionTimestamp != nil {
		return nil
	}
	svc := cur.DeepCopy()
	svc.Status.InitializeConditions()
	// manual (v1alpha1): the Service stops managing its Configuration and
	// Route; users edit them directly. Status still follows them.
	manual := svc.Annotations[v1alpha1.ModeAnnotation] == v1alpha1.ModeManual

	cfg, err := c.configs.Configurations(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err) && !manual:
		cfg, err = c.client.ServingV1().Configurations(ns).Create(ctx, desiredConfiguration(svc), metav1.CreateOptions{})
		if err != nil {
			c.events[serviceAgent].Eventf(svc, corev1.EventTypeWarning, "CreationFailed", "Failed to create Configuration %q: %v", name, err)
			return fmt.Errorf("create configuration: %w", err)
		}
		c.events[serviceAgent].Eventf(svc, corev1.EventTypeNormal, "Created", "Created Configuration %q", cfg.Name)
	case apierrors.IsNotFound(err):
		cfg = nil
	case err != nil:
		return err
	case !metav1.IsControlledBy(cfg, svc):
		svc.Status.MarkConfigurationNotOwned(name)
		return c.updateServiceStatus(ctx, cur, svc)
	case !manual:
		if cfg, err = c.syncConfiguration(ctx, svc, cfg); err != nil {
			return err
		}
	}

	rt, err := c.routes.Routes(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err) && !manual:
		rt, err = c.client.ServingV1().Routes(ns).Create(ctx, desiredRoute(svc), metav1.CreateOptions{})
		if err != nil {
			c.events[serviceAgent].Eventf(svc, corev1.EventTypeWarning, "CreationFailed", "Failed to create Route %q: %v", name, err)
			return fmt.Errorf("create route: %w", err)
		}
		c.events[serviceAgent].Eventf(svc, corev1.EventTypeNormal, "Created", "Created Route %q", rt.Name)
	case apierrors.IsNotFound(err):
		rt = nil
	case err != nil:
		return err
	case !metav1.IsControlledBy(rt, svc):
		svc.Status.MarkRouteNotOwned(name)
		return c.updateServiceStatus(ctx, cur, svc)
	case !manual:
		if rt, err = c.syncRoute(ctx, svc, rt); err != nil {
			return err
		}
	}

	if cfg != nil {
		if cfg.Generation != cfg.Status.ObservedGeneration {
			svc.Status.MarkConfigurationNotReconciled()
		} else {
			svc.Status.PropagateConfigurationStatus(&cfg.Status)
		}
	}
	if rt != nil {
		if rt.Generation != rt.Status.ObservedGeneration {
			svc.Status.MarkRouteNotReconciled()
		} else {
			svc.Status.PropagateRouteStatus(&rt.Status)
			// The route follows the latest ready revision only once it
			// has caught up with it.
			if cfg != nil && !routeFollowsLatest(rt, cfg) {
				svc.Status.MarkRouteNotYetReady()
			}
		}
	}
	svc.Status.ObservedGeneration = svc.Generation
	return c.updateServiceStatus(ctx, cur, svc)
}

func routeFollowsLatest(rt *servingv1.Route, cfg *servingv1.Configuration) bool {
	for _, t := range rt.Status.Traffic {
		if t.LatestRevision != nil && *t.LatestRevision && t.RevisionName != cfg.Status.LatestReadyRevisionName {
			return false
		}
	}
	return true
}

// syncConfiguration makes the Configuration match the Service: spec,
// labels and annotations, removals included.
func (c *Controller) syncConfiguration(ctx context.Context, svc *servingv1.Service, cfg *servingv1.Configuration) (*servingv1.Configuration, error) {
	want := desiredConfiguration(svc)
	if equality.Semantic.DeepEqual(cfg.Spec, want.Spec) && equality.Semantic.DeepEqual(cfg.Labels, want.Labels) && equality.Semantic.DeepEqual(cfg.Annotations, want.Annotations) {
		return cfg, nil
	}
	upd := cfg.DeepCopy()
	upd.Spec, upd.Labels, upd.Annotations = want.Spec, want.Labels, want.Annotations
	out, err := c.client.ServingV1().Configurations(svc.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update configuration: %w", err)
	}
	return out, nil
}

func (c *Controller) syncRoute(ctx context.Context, svc *servingv1.Service, rt *servingv1.Route) (*servingv1.Route, error) {
	want := desiredRoute(svc)
	if equality.Semantic.DeepEqual(rt.Spec.Traffic, want.Spec.Traffic) && equality.Semantic.DeepEqual(rt.Labels, want.Labels) && equality.Semantic.DeepEqual(rt.Annotations, want.Annotations) {
		return rt, nil
	}
	upd := rt.DeepCopy()
	upd.Spec, upd.Labels, upd.Annotations = want.Spec, want.Labels, want.Annotations
	out, err := c.client.ServingV1().Routes(svc.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update route: %w", err)
	}
	return out, nil
}

func (c *Controller) updateServiceStatus(ctx context.Context, cur, want *servingv1.Service) error {
	if equality.Semantic.DeepEqual(cur.Status, want.Status) {
		return nil
	}
	_, err := c.client.ServingV1().Services(want.Namespace).UpdateStatus(ctx, want, metav1.UpdateOptions{})
	return err
}
