package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	netclient "knative.dev/networking/pkg/client/clientset/versioned"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	servingv1beta1 "knative.dev/serving/pkg/apis/serving/v1beta1"
)

// newDomainEnv is an env whose controller reconciles DomainMappings and
// resyncs rarely, so that what a test sees comes from watch events.
func newDomainEnv(t *testing.T) *env {
	t.Helper()
	e := prepareEnv(t, nil)
	claims, err := netclient.NewForConfig(e.api.Config)
	if err != nil {
		t.Fatal(err)
	}
	e.claims = claims
	e.resync = time.Hour
	e.startController()
	return e
}

func (e *env) domainMapping(ns, name string) *servingv1beta1.DomainMapping {
	dm, err := e.client.ServingV1beta1().DomainMappings(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return dm
}

// TestClaimWakesDomainMapping: a mapping waiting for its domain's claim is
// served once the claim is made, and unserved once it is deleted, without
// touching the mapping.
func TestClaimWakesDomainMapping(t *testing.T) {
	e := newDomainEnv(t)
	ctx := context.Background()
	if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc("shop", "img"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.readyAt("shop", "shop-00001")
	const domain = "shop.example.com"
	dm := &servingv1beta1.DomainMapping{
		ObjectMeta: metav1.ObjectMeta{Name: domain, Namespace: "default"},
		Spec: servingv1beta1.DomainMappingSpec{Ref: duckv1.KReference{
			APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: "shop"}},
	}
	if _, err := e.client.ServingV1beta1().DomainMappings("default").Create(ctx, dm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimed := func(want metav1.ConditionStatus) func() error {
		return func() error {
			c := e.domainMapping("default", domain).Status.GetCondition(servingv1beta1.DomainMappingConditionDomainClaimed)
			if c == nil || string(c.Status) != string(want) {
				return fmt.Errorf("DomainClaimed %+v, want %s", c, want)
			}
			return nil
		}
	}
	eventually(t, "mapping refused without a claim", claimed(metav1.ConditionFalse))
	served := func(want bool) func() error {
		return func() error {
			for _, m := range e.routes.Mappings() {
				if m.Host == domain {
					if want {
						return nil
					}
					return fmt.Errorf("%s served: %+v", domain, m)
				}
			}
			if want {
				return fmt.Errorf("%s not served", domain)
			}
			return nil
		}
	}
	if err := served(false)(); err != nil {
		t.Fatal(err)
	}

	cdc := e.claims.NetworkingV1alpha1().ClusterDomainClaims()
	if _, err := cdc.Create(ctx, &netv1alpha1.ClusterDomainClaim{
		ObjectMeta: metav1.ObjectMeta{Name: domain},
		Spec:       netv1alpha1.ClusterDomainClaimSpec{Namespace: "default"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mapping claimed once the claim exists", claimed(metav1.ConditionTrue))
	eventually(t, "mapping served", served(true))

	if err := cdc.Delete(ctx, domain, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mapping refused once the claim is gone", claimed(metav1.ConditionFalse))
	eventually(t, "mapping unserved", served(false))
}
