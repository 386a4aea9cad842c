package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"knative.dev/pkg/apis"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/controller"
)

// TestRevisionRefusedByQuota: a Revision the namespace's quota refuses
// marks the Configuration (and the Service) failed with the quota's
// message, and is created once the quota allows it.
func TestRevisionRefusedByQuota(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(e.api.Config)
	if err != nil {
		t.Fatal(err)
	}
	rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "revs"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
		"count/revisions.serving.knative.dev": resource.MustParse("1"),
	}}}
	if _, err := kube.CoreV1().ResourceQuotas("default").Create(ctx, rq, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc("q", "img:1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.readyAt("q", "q-00001")
	e.update("q", func(s *servingv1.Service) { s.Spec.Template.Spec.Containers[0].Image = "img:2" })
	eventually(t, "the refusal on the Configuration and the Service", func() error {
		cfg, err := e.client.ServingV1().Configurations("default").Get(ctx, "q", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := cfg.Status.GetCondition(apis.ConditionReady)
		if c == nil || !c.IsFalse() || c.Reason != "RevisionFailed" || !strings.Contains(c.Message, "exceeded quota: revs") {
			return fmt.Errorf("configuration ready %+v", c)
		}
		s := e.svc("q")
		if sc := s.Status.GetCondition(apis.ConditionReady); sc == nil || !sc.IsFalse() || !strings.Contains(sc.Message, "exceeded quota: revs") {
			return fmt.Errorf("service ready %+v", sc)
		}
		return nil
	})
	rq, err = kube.CoreV1().ResourceQuotas("default").Get(ctx, "revs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Spec.Hard["count/revisions.serving.knative.dev"] = resource.MustParse("2")
	if _, err := kube.CoreV1().ResourceQuotas("default").Update(ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.readyAt("q", "q-00002")
}

// TestScaleHeldCondition: a scale-up the runtime holds (a quota) shows on
// the Revision as condition Scaled False (Warning) with the quota's
// message, and the Revision stays Ready.
func TestScaleHeldCondition(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.client.ServingV1().Services("default").Create(ctx, ksvc("held", "example.com/held:v1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the held condition", func() error {
		rev, err := e.client.ServingV1().Revisions("default").Get(ctx, "held-00001", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rc := rev.Status.GetCondition(apis.ConditionReady); rc == nil || !rc.IsTrue() {
			return fmt.Errorf("revision ready %+v", rc)
		}
		c := rev.Status.GetCondition(controller.ConditionScaled)
		if c == nil || !c.IsFalse() || c.Severity != apis.ConditionSeverityWarning || c.Reason != "ExceededQuota" ||
			!strings.Contains(c.Message, "exceeded quota: compute") {
			return fmt.Errorf("condition Scaled %+v", c)
		}
		return nil
	})
}
