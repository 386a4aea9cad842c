package controller

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"knative.dev/networking/pkg/apis/networking"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/routing"
)

// DefaultClusterDomain is Knative's cluster domain, Options.ClusterDomain's
// default.
const DefaultClusterDomain = "cluster.local"

// clusterLocalDomain is the in-cluster domain, svc.<cluster domain>; routes
// labelled cluster-local are addressed there and not served to external
// clients.
func (c *Controller) clusterLocalDomain() string { return "svc." + c.opts.ClusterDomain }

// targetError is a traffic target that cannot be resolved yet (or ever).
type targetError struct {
	mark func(*servingv1.RouteStatus)
	msg  string
}

func (e *targetError) Error() string { return e.msg }

// resolveTraffic resolves each target to a ready revision.
func (c *Controller) resolveTraffic(rt *servingv1.Route) ([]servingv1.TrafficTarget, error) {
	var out []servingv1.TrafficTarget
	for _, t := range rt.Spec.Traffic {
		st := servingv1.TrafficTarget{Tag: t.Tag, Percent: t.Percent, LatestRevision: t.LatestRevision}
		switch {
		case t.ConfigurationName != "":
			cfg, err := c.configs.Configurations(rt.Namespace).Get(t.ConfigurationName)
			if apierrors.IsNotFound(err) {
				name := t.ConfigurationName
				return nil, &targetError{mark: func(s *servingv1.RouteStatus) { s.MarkMissingTrafficTarget("Configuration", name) },
					msg: fmt.Sprintf("Configuration %q referenced in traffic not found", name)}
			}
			if err != nil {
				return nil, err
			}
			if cfg.Status.LatestReadyRevisionName == "" {
				failed := cfg.Status.GetCondition(servingv1.ConfigurationConditionReady).IsFalse()
				name := cfg.Name
				return nil, &targetError{mark: func(s *servingv1.RouteStatus) {
					if failed {
						s.MarkConfigurationFailed(name)
					} else {
						s.MarkConfigurationNotReady(name)
					}
				}, msg: fmt.Sprintf("Configuration %q not ready", name)}
			}
			st.RevisionName = cfg.Status.LatestReadyRevisionName
			if st.LatestRevision == nil {
				st.LatestRevision = ptr.To(true)
			}
		case t.RevisionName != "":
			rev, err := c.revisions.Revisions(rt.Namespace).Get(t.RevisionName)
			if apierrors.IsNotFound(err) {
				name := t.RevisionName
				return nil, &targetError{mark: func(s *servingv1.RouteStatus) { s.MarkMissingTrafficTarget("Revision", name) },
					msg: fmt.Sprintf("Revision %q referenced in traffic not found", name)}
			}
			if err != nil {
				return nil, err
			}
			if !rev.IsReady() {
				failed := rev.Status.GetCondition(servingv1.RevisionConditionReady).IsFalse()
				name := rev.Name
				return nil, &targetError{mark: func(s *servingv1.RouteStatus) {
					if failed {
						s.MarkRevisionFailed(name)
					} else {
						s.MarkRevisionNotReady(name)
					}
				}, msg: fmt.Sprintf("Revision %q not ready", name)}
			}
			st.RevisionName = rev.Name
			if st.LatestRevision == nil {
				st.LatestRevision = ptr.To(false)
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// domainData is what Knative's domain and tag templates see.
type domainData struct {
	Name, Namespace, Domain, Tag string
	Annotations, Labels          map[string]string
}

func (c *Controller) execTemplate(tmpl string, d domainData) (string, error) {
	t, err := template.New("domain").Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return "", err
	}
	return b.String(), nil
}

// hosts computes the route's host and each tag's host from config-network's
// domain-template and tag-template and config-domain.
func (c *Controller) hosts(rt *servingv1.Route, tags []string) (host string, tagHosts map[string]string, local bool, err error) {
	local = rt.Labels[networking.VisibilityLabelKey] == serving.VisibilityClusterLocal
	clusterLocalDomain := c.clusterLocalDomain()
	domain := clusterLocalDomain
	if !local {
		domain = c.domain.Load().LookupDomainForLabels(rt.Labels)
		if domain == clusterLocalDomain {
			local = true
		}
	}
	if local {
		host = rt.Name + "." + rt.Namespace + "." + clusterLocalDomain
	} else {
		host, err = c.execTemplate(c.opts.Network.DomainTemplate, domainData{Name: rt.Name, Namespace: rt.Namespace, Domain: domain, Annotations: rt.Annotations, Labels: rt.Labels})
		if err != nil {
			return "", nil, false, fmt.Errorf("domain-template: %w", err)
		}
	}
	tagHosts = map[string]string{}
	for _, tag := range tags {
		name, err := c.execTemplate(c.opts.Network.TagTemplate, domainData{Name: rt.Name, Namespace: rt.Namespace, Tag: tag})
		if err != nil {
			return "", nil, false, fmt.Errorf("tag-template: %w", err)
		}
		if local {
			tagHosts[tag] = name + "." + rt.Namespace + "." + clusterLocalDomain
			continue
		}
		h, err := c.execTemplate(c.opts.Network.DomainTemplate, domainData{Name: name, Namespace: rt.Namespace, Domain: domain, Annotations: rt.Annotations, Labels: rt.Labels})
		if err != nil {
			return "", nil, false, fmt.Errorf("domain-template: %w", err)
		}
		tagHosts[tag] = h
	}
	return host, tagHosts, local, nil
}

// url is the external URL of a host: the data plane's port is part of it
// unless it is 80, so the URL in status can be curled as is.
func (c *Controller) url(host string) *apis.URL {
	h := host
	if c.opts.HTTPPort != 0 && c.opts.HTTPPort != 80 {
		h = net.JoinHostPort(host, strconv.Itoa(c.opts.HTTPPort))
	}
	scheme := "http"
	if s := c.opts.Network.DefaultExternalScheme; s != "" {
		// config-network's default-external-scheme, as Knative shows it
		// (knbox's listener itself speaks what it is configured to).
		scheme = s
	}
	return &apis.URL{Scheme: scheme, Host: h}
}

func (c *Controller) reconcileRoute(ctx context.Context, ns, name string) error {
	cur, err := c.routes.Routes(ns).Get(name)
	if apierrors.IsNotFound(err) || err == nil && cur.DeletionTimestamp != nil {
		c.opts.Routes.Delete(ns, name)
		c.refs.drop(ns, name)
		return c.labelRevisions(ctx, ns)
	}
	if err != nil {
		return err
	}
	rt := cur.DeepCopy()
	rt.Status.InitializeConditions()
	rt.Status.ObservedGeneration = rt.Generation

	// The URL and address are known before the traffic resolves, and are
	// shown even while it does not (as Knative does).
	var tags []string
	for _, t := range rt.Spec.Traffic {
		if t.Tag != "" {
			tags = append(tags, t.Tag)
		}
	}
	host, tagHosts, local, err := c.hosts(rt, tags)
	if err != nil {
		rt.Status.MarkUnknownTrafficError(err.Error())
		return c.updateRouteStatus(ctx, cur, rt)
	}
	rt.Status.URL = c.url(host)
	if local {
		rt.Status.URL = &apis.URL{Scheme: "http", Host: host}
	}
	rt.Status.Address = &duckv1.Addressable{URL: &apis.URL{Scheme: "http", Host: name + "." + ns + "." + c.clusterLocalDomain()}}

	traffic, err := c.resolveTraffic(rt)
	if te, ok := err.(*targetError); ok {
		// Keep serving what was published before; say what is wrong.
		te.mark(&rt.Status)
		return c.updateRouteStatus(ctx, cur, rt)
	}
	if err != nil {
		return err
	}
	entry := routing.Route{Namespace: ns, Name: name, Host: host, ClusterLocal: local, Tags: map[string]string{}}
	for i := range traffic {
		t := &traffic[i]
		if t.Percent != nil && *t.Percent > 0 {
			entry.Traffic = append(entry.Traffic, routing.Split{Revision: t.RevisionName, Percent: *t.Percent, Tag: t.Tag})
		}
		if t.Tag != "" {
			entry.Tags[tagHosts[t.Tag]] = t.RevisionName
			t.URL = c.url(tagHosts[t.Tag])
			if local {
				// Reached from instances, on port 80.
				t.URL = &apis.URL{Scheme: "http", Host: tagHosts[t.Tag]}
			}
		}
	}
	c.opts.Routes.Set(entry)
	var names []string
	for _, t := range traffic {
		names = append(names, t.RevisionName)
	}
	c.refs.set(ns, name, names)

	rt.Status.Traffic = traffic
	rt.Status.MarkTrafficAssigned()
	rt.Status.MarkTLSNotEnabled("knbox serves plain HTTP; TLS termination is not configured")
	rt.Status.PropagateIngressStatus(netv1alpha1.IngressStatus{Status: duckv1.Status{Conditions: duckv1.Conditions{{
		Type: netv1alpha1.IngressConditionReady, Status: corev1.ConditionTrue}}}})
	if err := c.updateRouteStatus(ctx, cur, rt); err != nil {
		return err
	}
	return c.labelRevisions(ctx, ns)
}

func (c *Controller) updateRouteStatus(ctx context.Context, cur, want *servingv1.Route) error {
	if equality.Semantic.DeepEqual(cur.Status, want.Status) {
		return nil
	}
	_, err := c.client.ServingV1().Routes(want.Namespace).UpdateStatus(ctx, want, metav1.UpdateOptions{})
	return err
}
