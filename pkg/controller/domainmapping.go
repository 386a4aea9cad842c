package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	servingv1beta1 "knative.dev/serving/pkg/apis/serving/v1beta1"

	"github.com/knbox/knbox/pkg/routing"
)

const kindDomainMapping = "DomainMapping"

// reconcileDomainMapping publishes a DomainMapping's host for its Route, as
// Knative's domainmapping reconciler does: the domain must be claimed for
// the mapping's namespace by a ClusterDomainClaim (made here when
// config-network's autocreate-cluster-domain-claims is on, Knative's
// gate); a domain claimed for another namespace is refused in status
// (DomainClaimed False, DomainAlreadyClaimed) and not served. The reference
// must be a Knative Service or Route of the mapping's namespace.
func (c *Controller) reconcileDomainMapping(ctx context.Context, ns, name string) error {
	cur, err := c.domainMappings.DomainMappings(ns).Get(name)
	if apierrors.IsNotFound(err) || err == nil && cur.DeletionTimestamp != nil {
		c.unpublishMapping(ns, name)
		return c.releaseClaim(ctx, ns, name)
	}
	if err != nil {
		return err
	}
	dm := cur.DeepCopy()
	dm.Status.InitializeConditions()
	dm.Status.ObservedGeneration = dm.Generation
	dm.Status.URL = c.url(dm.Name)
	dm.Status.Address = &duckv1.Addressable{URL: c.url(dm.Name)}

	owned, err := c.claimDomain(ctx, dm)
	if err != nil {
		return err
	}
	if !owned {
		c.unpublishMapping(ns, name)
		return c.updateDomainMappingStatus(ctx, cur, dm)
	}
	route, reason := c.mappedRoute(dm)
	if reason != "" {
		dm.Status.MarkReferenceNotResolved(reason)
		c.unpublishMapping(ns, name)
		return c.updateDomainMappingStatus(ctx, cur, dm)
	}
	dm.Status.MarkReferenceResolved()
	c.opts.Routes.SetMapping(routing.Mapping{Host: dm.Name, Namespace: ns, Route: route})
	dm.Status.MarkTLSNotEnabled("knbox serves plain HTTP; TLS termination is not configured")
	dm.Status.MarkCertificateNotRequired("knbox serves plain HTTP")
	dm.Status.PropagateIngressStatus(netv1alpha1.IngressStatus{Status: duckv1.Status{Conditions: duckv1.Conditions{{
		Type: netv1alpha1.IngressConditionReady, Status: corev1.ConditionTrue}}}})
	return c.updateDomainMappingStatus(ctx, cur, dm)
}

// unpublishMapping removes the host of namespace's mapping name, if that
// namespace's mapping is the one published.
func (c *Controller) unpublishMapping(ns, name string) {
	for _, m := range c.opts.Routes.Mappings() {
		if m.Host == name && m.Namespace == ns {
			c.opts.Routes.DeleteMapping(name)
		}
	}
}

// claimDomain reports whether dm's namespace holds the domain's claim,
// making the claim when config-network lets it; it marks DomainClaimed.
func (c *Controller) claimDomain(ctx context.Context, dm *servingv1beta1.DomainMapping) (bool, error) {
	claims := c.opts.Claims.NetworkingV1alpha1().ClusterDomainClaims()
	claim, err := claims.Get(ctx, dm.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if !c.opts.Network.AutocreateClusterDomainClaims {
			dm.Status.MarkDomainClaimFailed(fmt.Sprintf("no ClusterDomainClaim %q: create one with spec.namespace %q, or set "+
				"config-network's autocreate-cluster-domain-claims to \"true\"", dm.Name, dm.Namespace))
			return false, nil
		}
		claim, err = claims.Create(ctx, &netv1alpha1.ClusterDomainClaim{
			ObjectMeta: metav1.ObjectMeta{Name: dm.Name, Labels: map[string]string{claimNamespaceLabel: dm.Namespace}},
			Spec:       netv1alpha1.ClusterDomainClaimSpec{Namespace: dm.Namespace},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, err // retried: read it again
		}
	}
	if err != nil {
		dm.Status.MarkDomainClaimFailed(err.Error())
		return false, err
	}
	if claim.Spec.Namespace != dm.Namespace {
		dm.Status.MarkDomainClaimNotOwned()
		return false, nil
	}
	dm.Status.MarkDomainClaimed()
	return true, nil
}

// claimNamespaceLabel marks the ClusterDomainClaims the controller made,
// which it deletes with the last mapping of their domain.
const claimNamespaceLabel = "knbox.dev/domain-mapping-namespace"

// releaseClaim deletes the claim the controller made for namespace's
// mapping of the domain name, once that mapping is gone.
func (c *Controller) releaseClaim(ctx context.Context, ns, name string) error {
	if !c.opts.Network.AutocreateClusterDomainClaims {
		return nil
	}
	claims := c.opts.Claims.NetworkingV1alpha1().ClusterDomainClaims()
	claim, err := claims.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if claim.Spec.Namespace != ns || claim.Labels[claimNamespaceLabel] != ns {
		return nil
	}
	err = claims.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &claim.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// mappedRoute is the Route dm's reference serves, or why there is none.
func (c *Controller) mappedRoute(dm *servingv1beta1.DomainMapping) (route, reason string) {
	ref := dm.Spec.Ref
	if ref.Namespace != "" && ref.Namespace != dm.Namespace {
		return "", fmt.Sprintf("spec.ref.namespace %q: a DomainMapping maps a Service of its own namespace %q", ref.Namespace, dm.Namespace)
	}
	switch {
	case (ref.Kind == "Service" || ref.Kind == "Route") && (ref.APIVersion == "serving.knative.dev/v1"):
	default:
		return "", fmt.Sprintf("spec.ref: %s %s: knbox maps Knative Services and Routes (apiVersion serving.knative.dev/v1)", ref.APIVersion, ref.Kind)
	}
	// A Knative Service's Route has the Service's name.
	if _, ok := c.opts.Routes.Get(dm.Namespace, ref.Name); !ok {
		return "", fmt.Sprintf("%s %q not found or not routed yet in namespace %q", ref.Kind, ref.Name, dm.Namespace)
	}
	return ref.Name, ""
}

func (c *Controller) updateDomainMappingStatus(ctx context.Context, cur, want *servingv1beta1.DomainMapping) error {
	if equality.Semantic.DeepEqual(cur.Status, want.Status) {
		return nil
	}
	_, err := c.client.ServingV1beta1().DomainMappings(want.Namespace).UpdateStatus(ctx, want, metav1.UpdateOptions{})
	return err
}

// enqueueDomainMappings wakes every DomainMapping of namespace (a Route
// came, went or changed).
func (c *Controller) enqueueDomainMappings(namespace string) {
	if c.domainMappings == nil {
		return
	}
	dms, err := c.domainMappings.DomainMappings(namespace).List(everything())
	if err != nil {
		return
	}
	for _, d := range dms {
		c.enqueue(kindDomainMapping, d.Namespace, d.Name)
	}
}

// enqueueSameDomain wakes the DomainMappings of domain in every namespace.
func (c *Controller) enqueueSameDomain(domain string) {
	dms, err := c.domainMappings.List(everything())
	if err != nil {
		return
	}
	for _, d := range dms {
		if d.Name == domain {
			c.enqueue(kindDomainMapping, d.Namespace, d.Name)
		}
	}
}
