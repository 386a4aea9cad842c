package admission

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/quota"
)

// checkOutcome: admission answers bad input with field errors or a 4xx
// API status, never another error.
func checkOutcome(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	st, ok := err.(apierrors.APIStatus)
	if !ok {
		t.Fatalf("error that is not an API status: %T %v", err, err)
	}
	if c := st.Status().Code; c < 400 || c >= 500 {
		t.Fatalf("status %d for bad input: %v", c, err)
	}
}

// FuzzNamespacePolicies writes Namespaces with fuzzed labels and
// annotations (Pod Security levels and versions, RuntimeClass access), as a
// create and as an update of a Namespace with Revisions in it.
func FuzzNamespacePolicies(f *testing.F) {
	f.Add(`{"pod-security.kubernetes.io/enforce":"restricted","pod-security.kubernetes.io/enforce-version":"v1.29"}`, `{"runtime.knbox.dev/allowed":"runsc","runtime.knbox.dev/default":"runsc"}`)
	f.Add(`{"pod-security.kubernetes.io/warn":"strict","pod-security.kubernetes.io/audit-version":"latest"}`, `{"runtime.knbox.dev/allowed":"runsc,,runc"}`)
	f.Add(`{"pod-security.kubernetes.io/enforce":"baseline","pod-security.kubernetes.io/enforce-version":"v9.999"}`, `{"runtime.knbox.dev/allowed":"*","runtime.knbox.dev/default":"Bad Name"}`)
	f.Fuzz(func(t *testing.T, labelsJSON, annotationsJSON string) {
		var labels, annotations map[string]string
		if json.Unmarshal([]byte(labelsJSON), &labels) != nil || json.Unmarshal([]byte(annotationsJSON), &annotations) != nil {
			return
		}
		e := newTenantEnv(t, newNamespace("team", nil, nil))
		r := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{Name: "hello-00001", Namespace: "team"}}
		r.Spec.PodSpec = service("", "", nil).Spec.Template.Spec.PodSpec
		e.objs.revs = append(e.objs.revs, r)
		ns := newNamespace("team", labels, annotations)
		_, _, err := e.admit(t, Create, ns.DeepCopy(), nil, corev1.Resource("namespaces"))
		checkOutcome(t, err)
		_, _, err = e.admit(t, Update, ns.DeepCopy(), e.objs.ns["team"], corev1.Resource("namespaces"))
		checkOutcome(t, err)
		// Whatever the labels say, a Service in the namespace gets a clear
		// answer.
		e.objs.ns["team"] = ns
		_, _, err = e.admit(t, Create, service("team", "a", nil), nil, ksvcGR)
		checkOutcome(t, err)
	})
}

// FuzzAdmitRevision admits fuzzed Revisions into a namespace with a fuzzed
// ResourceQuota and LimitRange and Pod Security levels: every answer is a
// field error or a 4xx, and the Revision's resources stay as written (the
// LimitRange's defaults belong on the instance).
func FuzzAdmitRevision(f *testing.F) {
	f.Add(`{"metadata":{"name":"r"},"spec":{"containers":[{"image":"example.com/a","resources":{"limits":{"cpu":"2"}}}]}}`,
		`{"hard":{"limits.cpu":"1","pods":"1","count/revisions.serving.knative.dev":"0"}}`,
		`{"limits":[{"type":"Container","max":{"cpu":"1"},"default":{"memory":"1Gi"}}]}`, "restricted")
	f.Add(`{"metadata":{"name":"r","annotations":{"container.apparmor.security.beta.kubernetes.io/user-container":"unconfined"}},"spec":{"runtimeClassName":"runc","containers":[{"image":"a","securityContext":{"runAsUser":0,"seccompProfile":{"type":"Unconfined"}}}]}}`,
		`{"hard":{"requests.memory":"1Mi"},"scopes":["NotBestEffort"]}`,
		`{"limits":[{"type":"Pod","max":{"memory":"1Mi"}}]}`, "baseline")
	f.Fuzz(func(t *testing.T, revJSON, quotaJSON, rangeJSON, level string) {
		var rev servingv1.Revision
		var rq corev1.ResourceQuotaSpec
		var lr corev1.LimitRangeSpec
		if json.Unmarshal([]byte(revJSON), &rev) != nil || json.Unmarshal([]byte(quotaJSON), &rq) != nil || json.Unmarshal([]byte(rangeJSON), &lr) != nil {
			return
		}
		if len(rev.Spec.Containers)+len(rev.Spec.InitContainers) > 8 {
			return
		}
		e := newTenantEnv(t, newNamespace("team", map[string]string{"pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/warn": "restricted"}, nil))
		q := corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "team"}, Spec: rq}
		if len(quota.ValidateResourceQuota(&q)) == 0 {
			e.objs.quotas = append(e.objs.quotas, q)
		}
		l := corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "team"}, Spec: lr}
		quota.DefaultLimitRange(&l)
		if len(quota.ValidateLimitRange(&l)) == 0 {
			e.objs.ranges = append(e.objs.ranges, l)
		}
		rev.Namespace = "team"
		if rev.Name == "" {
			rev.Name = "r"
		}
		written := make([]corev1.ResourceRequirements, len(rev.Spec.Containers))
		for i, c := range rev.Spec.Containers {
			written[i] = *c.Resources.DeepCopy()
		}
		_, _, err := e.admit(t, Create, &rev, nil, servingv1.Resource("revisions"))
		checkOutcome(t, err)
		for i := range written {
			if i < len(rev.Spec.Containers) && !apiequality.Semantic.DeepEqual(normalize(written[i]), normalize(rev.Spec.Containers[i].Resources)) {
				t.Fatalf("admission rewrote container %d's resources: %v -> %v", i, written[i], rev.Spec.Containers[i].Resources)
			}
		}
	})
}

func normalize(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	if len(r.Limits) == 0 {
		r.Limits = nil
	}
	if len(r.Requests) == 0 {
		r.Requests = nil
	}
	return r
}
