package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	gcconfig "knative.dev/serving/pkg/gc"
)

// referenced tracks, per route, the revisions its traffic names (0% and
// tag-only targets included): those are "active" and never collected.
type referenced struct {
	mu sync.Mutex
	m  map[string]map[string]bool // namespace/route -> revision names
}

func (r *referenced) set(ns, route string, revs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]map[string]bool{}
	}
	s := map[string]bool{}
	for _, n := range revs {
		s[n] = true
	}
	r.m[ns+"/"+route] = s
}

func (r *referenced) drop(ns, route string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, ns+"/"+route)
}

func (r *referenced) in(ns, rev string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, s := range r.m {
		if len(k) > len(ns) && k[:len(ns)+1] == ns+"/" && s[rev] {
			return true
		}
	}
	return false
}

// labelRevisions keeps each revision's routingState label (active when a
// route names it, reserve otherwise) and the time it last changed, which
// garbage collection reads, as Knative's labeler does.
func (c *Controller) labelRevisions(ctx context.Context, ns string) error {
	revs, err := c.revisions.Revisions(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	now := c.clock.Now().UTC().Format(time.RFC3339)
	for _, rev := range revs {
		want := servingv1.RoutingStateReserve
		if c.refs.in(ns, rev.Name) {
			want = servingv1.RoutingStateActive
		}
		if rev.Labels[serving.RoutingStateLabelKey] == string(want) {
			continue
		}
		patch, _ := json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{
			"labels":      map[string]string{serving.RoutingStateLabelKey: string(want)},
			"annotations": map[string]string{serving.RoutingStateModifiedAnnotationKey: now},
		}})
		_, err := c.client.ServingV1().Revisions(ns).Patch(ctx, rev.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("label revision %s: %w", rev.Name, err)
		}
	}
	return nil
}

// collectAll applies config-gc to every configuration.
func (c *Controller) collectAll(ctx context.Context) {
	cfgs, err := c.configs.List(labels.Everything())
	if err != nil {
		return
	}
	// One pass over the revisions, not one per configuration (each of
	// which walks every revision of its namespace).
	all, err := c.revisions.List(labels.Everything())
	if err != nil {
		return
	}
	type cfgKey struct{ namespace, name string }
	byCfg := map[cfgKey][]*servingv1.Revision{}
	for _, r := range all {
		if name := r.Labels[serving.ConfigurationLabelKey]; name != "" {
			k := cfgKey{r.Namespace, name}
			byCfg[k] = append(byCfg[k], r)
		}
	}
	for _, cfg := range cfgs {
		revs := byCfg[cfgKey{cfg.Namespace, cfg.Name}]
		if err := c.collectFrom(ctx, cfg, revs); err != nil && ctx.Err() == nil {
			c.log.Warn("revision garbage collection failed", "namespace", cfg.Namespace, "configuration", cfg.Name, "err", err)
		}
	}
}

// lastActive is when a revision last stopped being routed (or was
// created, if it never was).
func lastActive(rev *servingv1.Revision) time.Time {
	if s := rev.Annotations[serving.RoutingStateModifiedAnnotationKey]; s != "" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			return t
		}
	}
	return rev.CreationTimestamp.Time
}

// collect deletes a configuration's non-active revisions with Knative's
// config-gc rules: keep at least min-non-active-revisions; beyond that,
// delete those older than retain-since-create-time whose last activity is
// older than retain-since-last-active-time; and never keep more than
// max-non-active-revisions. Revisions that traffic names, the latest
// created and latest ready, and those annotated serving.knative.dev/no-gc:
// "true" are never collected.
func (c *Controller) collect(ctx context.Context, cfg *servingv1.Configuration) error {
	revs, err := c.revisions.Revisions(cfg.Namespace).List(labels.SelectorFromSet(labels.Set{serving.ConfigurationLabelKey: cfg.Name}))
	if err != nil {
		return err
	}
	return c.collectFrom(ctx, cfg, revs)
}

// collectFrom is collect with the configuration's revisions given.
func (c *Controller) collectFrom(ctx context.Context, cfg *servingv1.Configuration, revs []*servingv1.Revision) error {
	gc := c.opts.GC
	var candidates []*servingv1.Revision
	for _, r := range revs {
		switch {
		case r.DeletionTimestamp != nil,
			r.Name == cfg.Status.LatestCreatedRevisionName,
			r.Name == cfg.Status.LatestReadyRevisionName,
			r.Annotations[serving.RevisionPreservedAnnotationKey] == "true",
			c.refs.in(r.Namespace, r.Name),
			r.Labels[serving.RoutingStateLabelKey] == string(servingv1.RoutingStateActive),
			r.Labels[serving.RoutingStateLabelKey] == string(servingv1.RoutingStatePending):
			continue
		}
		candidates = append(candidates, r)
	}
	min := int(gc.MinNonActiveRevisions)
	if len(candidates) <= min {
		return nil
	}
	// Oldest activity first: those go first.
	sort.Slice(candidates, func(i, j int) bool { return lastActive(candidates[i]).Before(lastActive(candidates[j])) })
	now := c.clock.Now()
	old := func(t time.Time, retain time.Duration) bool {
		return retain == gcconfig.Disabled || now.Sub(t) > retain
	}
	remaining := len(candidates)
	for _, r := range candidates {
		if remaining <= min {
			break
		}
		overMax := gc.MaxNonActiveRevisions != gcconfig.Disabled && int64(remaining) > gc.MaxNonActiveRevisions
		stale := old(r.CreationTimestamp.Time, gc.RetainSinceCreateTime) && old(lastActive(r), gc.RetainSinceLastActiveTime)
		if gc.RetainSinceCreateTime == gcconfig.Disabled && gc.RetainSinceLastActiveTime == gcconfig.Disabled {
			stale = false // both disabled: only max-non-active collects
		}
		if !overMax && !stale {
			continue
		}
		err := c.client.ServingV1().Revisions(r.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete revision %s: %w", r.Name, err)
		}
		c.log.Info("revision collected", "namespace", r.Namespace, "revision", r.Name)
		remaining--
	}
	return nil
}
