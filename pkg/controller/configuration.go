package controller

import (
	"context"
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"strconv"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"knative.dev/pkg/kmeta"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// revisionName is the name of the Revision a Configuration's generation
// stamps: the template's name when given, else {configuration}-{00001},
// shortened with a hash past 63 characters as Knative does.
func revisionName(cfg *servingv1.Configuration) string {
	if n := cfg.Spec.Template.Name; n != "" {
		return n
	}
	return kmeta.ChildName(cfg.Name, fmt.Sprintf("-%05d", cfg.Generation))
}

// desiredRevision is the Revision for the Configuration's current
// generation: the template's metadata and spec, Knative's labels, the
// creator taken from the Configuration's last modifier, and an owner
// reference so deletion cascades.
func desiredRevision(cfg *servingv1.Configuration) *servingv1.Revision {
	tmpl := cfg.Spec.Template.DeepCopy()
	rev := &servingv1.Revision{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	rev.Name = revisionName(cfg)
	rev.Namespace = cfg.Namespace
	rev.GenerateName = ""
	if rev.Labels == nil {
		rev.Labels = map[string]string{}
	}
	rev.Labels[serving.ConfigurationLabelKey] = cfg.Name
	rev.Labels[serving.ConfigurationGenerationLabelKey] = strconv.FormatInt(cfg.Generation, 10)
	rev.Labels[serving.ConfigurationUIDLabelKey] = string(cfg.UID)
	if s := cfg.Labels[serving.ServiceLabelKey]; s != "" {
		rev.Labels[serving.ServiceLabelKey] = s
		rev.Labels[serving.ServiceUIDLabelKey] = cfg.Labels[serving.ServiceUIDLabelKey]
	}
	if rev.Annotations == nil {
		rev.Annotations = map[string]string{}
	}
	if m := cfg.Annotations[serving.UpdaterAnnotation]; m != "" {
		rev.Annotations[serving.CreatorAnnotation] = m
	}
	rev.Labels[serving.RoutingStateLabelKey] = string(servingv1.RoutingStatePending)
	rev.OwnerReferences = []metav1.OwnerReference{*kmeta.NewControllerRef(cfg)}
	return rev
}

func generationOf(rev *servingv1.Revision) int64 {
	g, err := strconv.ParseInt(rev.Labels[serving.ConfigurationGenerationLabelKey], 10, 64)
	if err != nil {
		return -1
	}
	return g
}

func (c *Controller) reconcileConfiguration(ctx context.Context, ns, name string) error {
	cur, err := c.configs.Configurations(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.DeletionTimestamp != nil {
		return nil
	}
	cfg := cur.DeepCopy()
	cfg.Status.InitializeConditions()

	lcr, err := c.latestCreated(ctx, cfg)
	if err != nil {
		if apierrors.IsAlreadyExists(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			// The API refused the Revision: its name is taken, or a
			// namespace policy (quota, LimitRange, Pod Security,
			// RuntimeClass access) says no. Knative marks the
			// Configuration; a policy's no may turn into a yes (the
			// quota frees), so that is retried with backoff.
			cfg.Status.MarkRevisionCreationFailed(err.Error())
			cfg.Status.ObservedGeneration = cfg.Generation
			if uerr := c.updateConfigurationStatus(ctx, cur, cfg); uerr != nil || apierrors.IsAlreadyExists(err) {
				return uerr
			}
		}
		return err
	}
	cfg.Status.SetLatestCreatedRevisionName(lcr.Name)
	if rc := lcr.Status.GetCondition(servingv1.RevisionConditionReady); rc != nil && rc.IsFalse() {
		cfg.Status.MarkLatestCreatedFailed(lcr.Name, rc.GetMessage())
	}

	// The latest ready revision: the ready one of the highest generation
	// among this configuration's revisions.
	revs, err := c.revisions.Revisions(ns).List(labels.SelectorFromSet(labels.Set{serving.ConfigurationLabelKey: cfg.Name}))
	if err != nil {
		return err
	}
	var best *servingv1.Revision
	for _, r := range revs {
		if r.DeletionTimestamp != nil || !r.IsReady() || !metav1.IsControlledBy(r, cfg) {
			continue
		}
		if best == nil || generationOf(r) > generationOf(best) || r.Name == lcr.Name {
			best = r
			if r.Name == lcr.Name {
				break
			}
		}
	}
	switch {
	case best != nil:
		cfg.Status.SetLatestReadyRevisionName(best.Name)
	case cfg.Status.LatestReadyRevisionName != "":
		if _, err := c.revisions.Revisions(ns).Get(cfg.Status.LatestReadyRevisionName); apierrors.IsNotFound(err) {
			cfg.Status.MarkLatestReadyDeleted()
			cfg.Status.LatestReadyRevisionName = ""
		}
	}
	cfg.Status.ObservedGeneration = cfg.Generation
	if err := c.updateConfigurationStatus(ctx, cur, cfg); err != nil {
		return err
	}
	return c.collect(ctx, cfg)
}

// latestCreated finds, or creates, the Revision of the Configuration's
// current generation. A bring-your-own name taken by another owner, or by
// a revision of a different template, is an AlreadyExists error.
func (c *Controller) latestCreated(ctx context.Context, cfg *servingv1.Configuration) (*servingv1.Revision, error) {
	name := revisionName(cfg)
	rev, err := c.revisions.Revisions(cfg.Namespace).Get(name)
	if err == nil {
		if !metav1.IsControlledBy(rev, cfg) {
			return nil, apierrors.NewAlreadyExists(servingv1.Resource("revisions"), name)
		}
		if cfg.Spec.Template.Name != "" && !equality.Semantic.DeepEqual(rev.Spec, cfg.Spec.Template.Spec) {
			return nil, apierrors.NewAlreadyExists(servingv1.Resource("revisions"), name)
		}
		return rev, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	rev, err = c.client.ServingV1().Revisions(cfg.Namespace).Create(ctx, desiredRevision(cfg), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Created by an earlier pass the informer has not seen yet.
		return c.client.ServingV1().Revisions(cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		c.events[configurationAgent].Eventf(cfg, corev1.EventTypeWarning, "CreationFailed", "Failed to create Revision: %v", err)
		return nil, fmt.Errorf("create revision %s: %w", name, err)
	}
	c.events[configurationAgent].Eventf(cfg, corev1.EventTypeNormal, "Created", "Created Revision %q", rev.Name)
	return rev, nil
}

func (c *Controller) updateConfigurationStatus(ctx context.Context, cur, want *servingv1.Configuration) error {
	if equality.Semantic.DeepEqual(cur.Status, want.Status) {
		return nil
	}
	_, err := c.client.ServingV1().Configurations(want.Namespace).UpdateStatus(ctx, want, metav1.UpdateOptions{})
	if err == nil {
		c.configurationEvents(cur, want)
	}
	return err
}
