package quota

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// FuzzQuotaObjects feeds ResourceQuota and LimitRange objects as a client
// sends them: validation and defaulting never panic, defaulting is
// idempotent, and a LimitRange that validates keeps validating.
func FuzzQuotaObjects(f *testing.F) {
	f.Add([]byte(`{"spec":{"hard":{"cpu":"2","count/services.serving.knative.dev":"3","pods":"1.5"},"scopes":["BestEffort","Bogus"]}}`),
		[]byte(`{"spec":{"limits":[{"type":"Container","max":{"cpu":"1"},"min":{"cpu":"2"},"maxLimitRequestRatio":{"memory":"0.5"}}]}}`))
	f.Add([]byte(`{"spec":{"hard":{"a/b/c":"-1","requests.example.com/gpu":"1e18"},"scopeSelector":{"matchExpressions":[{"scopeName":"PriorityClass","operator":"Exists","values":["x"]}]}}}`),
		[]byte(`{"spec":{"limits":[{"type":"Pod","default":{"cpu":"1"}},{"type":"Pod"},{"type":"Container","default":{"hugepages-2Mi":"2Mi"},"defaultRequest":{"hugepages-2Mi":"4Mi"}}]}}`))
	f.Add([]byte(`{}`), []byte(`{"spec":{"limits":[{"type":"Container","min":{"cpu":"0"},"max":{"cpu":"9223372036854775807"},"maxLimitRequestRatio":{"cpu":"1e300"}}]}}`))
	f.Fuzz(func(t *testing.T, rqJSON, lrJSON []byte) {
		var rq corev1.ResourceQuota
		if json.Unmarshal(rqJSON, &rq) == nil {
			_ = ValidateResourceQuota(&rq)
			for n := range rq.Spec.Hard {
				_, _ = countedResource(n)
				_ = isPodResource(n)
			}
		}
		var lr corev1.LimitRange
		if json.Unmarshal(lrJSON, &lr) != nil {
			return
		}
		DefaultLimitRange(&lr)
		once := lr.DeepCopy()
		DefaultLimitRange(&lr)
		if !equalJSON(t, once, &lr) {
			t.Fatalf("defaulting is not idempotent")
		}
		if errs := ValidateLimitRange(&lr); len(errs) == 0 {
			if errs := ValidateLimitRange(lr.DeepCopy()); len(errs) != 0 {
				t.Fatalf("a valid LimitRange turned invalid: %v", errs)
			}
		}
	})
}

// FuzzPodAdmission admits fuzzed pod specs against fuzzed quotas and limit
// ranges through the Ledger: no panic, EffectivePod leaves its input alone,
// every refusal is a quota refusal, and the reservations that succeed never
// sum above a hard limit of an unscoped quota.
func FuzzPodAdmission(f *testing.F) {
	f.Add([]byte(`{"hard":{"limits.cpu":"2","pods":"3","requests.memory":"1Gi"}}`),
		[]byte(`{"spec":{"limits":[{"type":"Container","default":{"cpu":"1","memory":"128Mi"},"defaultRequest":{"memory":"64Mi"},"max":{"cpu":"1"}}]}}`),
		[]byte(`{"containers":[{"name":"user-container","resources":{"limits":{"cpu":"1"}}},{"name":"side"}]}`))
	f.Add([]byte(`{"hard":{"cpu":"0"},"scopes":["NotBestEffort"]}`), []byte(`{}`),
		[]byte(`{"initContainers":[{"name":"i","resources":{"requests":{"cpu":"9e18"}}}],"containers":[{"name":"c","resources":{"requests":{"example.com/gpu":"1","hugepages-2Mi":"2Mi"}}}]}`))
	f.Fuzz(func(t *testing.T, specJSON, lrJSON, podJSON []byte) {
		var hard corev1.ResourceQuotaSpec
		var lr corev1.LimitRange
		var pod corev1.PodSpec
		if json.Unmarshal(specJSON, &hard) != nil || json.Unmarshal(lrJSON, &lr) != nil || json.Unmarshal(podJSON, &pod) != nil {
			return
		}
		if len(pod.Containers)+len(pod.InitContainers) > 16 {
			return
		}
		rq := corev1.ResourceQuota{Spec: hard}
		rq.Name, rq.Namespace = "q", "team"
		if len(ValidateResourceQuota(&rq)) > 0 {
			return // the API refuses it before it could reach the ledger
		}
		DefaultLimitRange(&lr)
		if len(ValidateLimitRange(&lr)) > 0 {
			return
		}
		before, _ := json.Marshal(&pod)
		src := &fakeSource{quotas: []corev1.ResourceQuota{rq}, ranges: []corev1.LimitRange{lr}}
		l := NewLedger(src)
		ctx := context.Background()
		eff, err := l.EffectivePod(ctx, "team", &pod)
		if err != nil {
			t.Fatal(err)
		}
		_ = CheckLimitRanges(eff, src.ranges)
		for i := 0; i < 4; i++ {
			_, _, err := l.Reserve(ctx, "team", &pod)
			if err != nil && !errors.Is(err, ErrExceeded) {
				t.Fatalf("refusal that is not a quota refusal: %v", err)
			}
		}
		if after, _ := json.Marshal(&pod); string(after) != string(before) {
			t.Fatalf("admission changed the Revision's pod spec:\n%s\n%s", before, after)
		}
		if scoped(&rq) {
			return
		}
		used, err := l.Used(ctx, &rq)
		if err != nil {
			t.Fatal(err)
		}
		for n, h := range rq.Spec.Hard {
			if u, ok := used[n]; ok && isPodResource(n) && u.Cmp(h) > 0 {
				t.Fatalf("%s used %s above hard %s", n, u.String(), h.String())
			}
		}
	})
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(x) == string(y)
}
