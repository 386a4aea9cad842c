package e2e

import (
	"strings"
	"testing"
	"time"
)

// tenantService is a Knative Service in a namespace; extra lines go under
// the container (indented for it) and podExtra under the pod spec.
func tenantService(ns, name, podExtra, containerExtra string) string {
	y := "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: " + name + "\n  namespace: " + ns +
		"\nspec:\n  template:\n    spec:\n"
	if podExtra != "" {
		y += "      " + podExtra + "\n"
	}
	y += "      containers:\n      - image: 127.0.0.1:1/hello:v1\n"
	if containerExtra != "" {
		y += containerExtra
	}
	return y
}

// TestTenantPolicies drives the namespace policies an operator sets with
// the real kubectl: a quota refusal and kubectl describe quota, a
// LimitRange maximum, Pod Security enforce and warn, RuntimeClass access
// and a namespace's default RuntimeClass.
func TestTenantPolicies(t *testing.T) {
	k := newKubectl(t)
	k.must("", "create", "namespace", "team-a")

	// ResourceQuota: object counts and instances' resources.
	k.must(`apiVersion: v1
kind: ResourceQuota
metadata: {name: compute, namespace: team-a}
spec:
  hard: {count/services.serving.knative.dev: "1", limits.cpu: "2", configmaps: "5"}
`, "apply", "-f", "-")
	limited := "        resources: {limits: {cpu: 500m}}\n"
	k.must(tenantService("team-a", "first", "", limited), "apply", "-f", "-")
	out, err := k.run(tenantService("team-a", "second", "", limited), "apply", "-f", "-")
	want := `services.serving.knative.dev "second" is forbidden: exceeded quota: compute, requested: count/services.serving.knative.dev=1, used: count/services.serving.knative.dev=1, limited: count/services.serving.knative.dev=1`
	if err == nil || !strings.Contains(out, "Error from server (Forbidden)") || !strings.Contains(out, want) {
		t.Errorf("second Service past the quota: err=%v\n%s", err, out)
	}
	var describe string
	deadline := time.Now().Add(30 * time.Second)
	for {
		describe = k.must("", "describe", "quota", "compute", "-n", "team-a")
		if strings.Contains(describe, "count/services.serving.knative.dev  1     1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl describe quota never showed the Service:\n%s", describe)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, line := range []string{"Name:", "compute", "Resource", "Used", "Hard", "configmaps", "limits.cpu"} {
		if !strings.Contains(describe, line) {
			t.Errorf("kubectl describe quota lacks %q:\n%s", line, describe)
		}
	}
	if out := k.must("", "get", "quota", "-n", "team-a"); !strings.Contains(out, "count/services.serving.knative.dev: 1/1") {
		t.Errorf("kubectl get quota:\n%s", out)
	}
	out, err = k.run(`{"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":"bad","namespace":"team-a"},"spec":{"hard":{"cpus":"1"}}}`, "apply", "-f", "-")
	if err == nil || !strings.Contains(out, `spec.hard[cpus]: Invalid value: "cpus": must be a standard resource for quota`) {
		t.Errorf("unknown resource in hard: err=%v\n%s", err, out)
	}
	k.must("", "delete", "quota", "compute", "-n", "team-a")

	// LimitRange: a container above the maximum is refused.
	k.must(`apiVersion: v1
kind: LimitRange
metadata: {name: limits, namespace: team-a}
spec:
  limits:
  - type: Container
    max: {cpu: "1"}
    default: {cpu: 500m, memory: 128Mi}
`, "apply", "-f", "-")
	out, err = k.run(tenantService("team-a", "big", "", "        resources: {limits: {cpu: \"2\"}}\n"), "apply", "-f", "-")
	if err == nil || !strings.Contains(out, `services.serving.knative.dev "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2`) {
		t.Errorf("above the LimitRange maximum: err=%v\n%s", err, out)
	}
	if out := k.must("", "describe", "limits", "limits", "-n", "team-a"); !strings.Contains(out, "Container   cpu") {
		t.Errorf("kubectl describe limits:\n%s", out)
	}

	// Pod Security: restricted enforced refuses, warned warns.
	k.must("", "create", "namespace", "strict")
	k.must("", "label", "namespace", "strict", "pod-security.kubernetes.io/enforce=restricted")
	out, err = k.run(tenantService("strict", "plain", "", ""), "apply", "-f", "-")
	if err == nil || !strings.Contains(out, `services.serving.knative.dev "plain" is forbidden: violates PodSecurity "restricted:latest": `) ||
		!strings.Contains(out, "runAsNonRoot != true") {
		t.Errorf("restricted namespace, nothing set: err=%v\n%s", err, out)
	}
	hardened := "        securityContext: {runAsNonRoot: true, capabilities: {drop: [ALL]}}\n"
	k.must(tenantService("strict", "hardened", "", hardened), "apply", "-f", "-")
	k.must("", "create", "namespace", "watched")
	k.must("", "label", "namespace", "watched", "pod-security.kubernetes.io/warn=restricted")
	out = k.must(tenantService("watched", "plain", "", ""), "apply", "-f", "-")
	if !strings.Contains(out, `Warning: would violate PodSecurity "restricted:latest": `) || !strings.Contains(out, "service.serving.knative.dev/plain created") {
		t.Errorf("warn level: %s", out)
	}
	out, err = k.run("", "label", "namespace", "watched", "pod-security.kubernetes.io/enforce=strict")
	if err == nil || !strings.Contains(out, `metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict"`) {
		t.Errorf("unknown level: err=%v\n%s", err, out)
	}

	// RuntimeClass access: a namespace limited to runsc with runsc as its
	// default.
	k.must("", "create", "namespace", "sandboxed")
	k.must("", "annotate", "namespace", "sandboxed", "runtime.knbox.dev/allowed=runsc", "runtime.knbox.dev/default=runsc")
	k.must(tenantService("sandboxed", "defaulted", "", ""), "apply", "-f", "-")
	if got := k.must("", "get", "ksvc", "defaulted", "-n", "sandboxed", "-o", "jsonpath={.spec.template.spec.runtimeClassName}"); got != "runsc" {
		t.Errorf("runtimeClassName = %q, want the namespace's default runsc", got)
	}
	out, err = k.run(tenantService("sandboxed", "escape", "runtimeClassName: runc", ""), "apply", "-f", "-")
	if err == nil || !strings.Contains(out, `spec.template.spec.runtimeClassName: Forbidden: RuntimeClass "runc" is not allowed in namespace "sandboxed" (allowed: runsc`) {
		t.Errorf("runc in a runsc namespace: err=%v\n%s", err, out)
	}
}
