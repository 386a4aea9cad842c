package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

const quotaServiceYAML = `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: squeezed
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/min-scale: "3"
    spec:
      runtimeClassName: runc
      containers:
      - image: %s
        resources:
          limits: {memory: 48Mi}
`

const quotaYAML = `apiVersion: v1
kind: ResourceQuota
metadata: {name: compute}
spec:
  hard:
    limits.memory: %s
`

// TestQuotaHoldsScaleUpE2E: a Service that wants three instances in a
// namespace whose ResourceQuota fits two gets two; the third is held and
// the Revision says so (condition Scaled, with the quota, resource, used,
// requested and hard) while it stays Ready; the quota's status counts the
// two; raising the quota lets the third start.
func TestQuotaHoldsScaleUpE2E(t *testing.T) {
	requireTool(t, "runc")
	k := newKubectl(t)
	reg := imagetest.StartRegistry(t)
	bin := imagetest.BuildGo(t, "github.com/knbox/knbox/test/images/runtime-info")
	ref := imagetest.PushImage(t, reg, "runtime-info:quota", image.Config{Entrypoint: []string{"/app"}},
		append(imagetest.BaseFiles(), imagetest.File{Path: "app", Mode: 0o755, Body: bin}))
	awaitOK(t, 90*time.Second, "the runc RuntimeClass", func() (string, error) { return k.run("", "get", "runtimeclass", "runc") })

	k.must(fmt.Sprintf(quotaYAML, "128Mi"), "apply", "-f", "-")
	k.must(fmt.Sprintf(quotaServiceYAML, ref), "apply", "-f", "-")
	awaitOK(t, 4*time.Minute, "ksvc squeezed Ready", func() (string, error) {
		return k.run("", "wait", "ksvc/squeezed", "--for=condition=Ready", "--timeout=50s")
	})
	rev := "squeezed-00001"
	held := `jsonpath={.status.conditions[?(@.type=="Scaled")].reason}|{.status.conditions[?(@.type=="Scaled")].message}|{.status.actualReplicas}`
	var got string
	awaitOK(t, 2*time.Minute, "two instances and the third held", func() (string, error) {
		got = k.must("", "get", "rev", rev, "-o", held)
		if !strings.HasPrefix(got, "ExceededQuota|") || !strings.HasSuffix(got, "|2") {
			return got, fmt.Errorf("not held at two")
		}
		return got, nil
	})
	for _, w := range []string{"exceeded quota: compute", "requested: limits.memory=48Mi", "used: limits.memory=96Mi", "limited: limits.memory=128Mi"} {
		if !strings.Contains(got, w) {
			t.Errorf("Scaled condition %q lacks %q", got, w)
		}
	}
	if ready := k.must("", "get", "rev", rev, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); ready != "True" {
		t.Errorf("revision Ready %q while the scale-up is held, want True", ready)
	}
	awaitOK(t, 30*time.Second, "the quota's status", func() (string, error) {
		out := k.must("", "get", "quota", "compute", "-o", "jsonpath={.status.used.limits\\.memory}")
		if out != "96Mi" {
			return out, fmt.Errorf("used %q, want 96Mi", out)
		}
		return out, nil
	})

	k.must(fmt.Sprintf(quotaYAML, "256Mi"), "apply", "-f", "-")
	awaitOK(t, 2*time.Minute, "the third instance", func() (string, error) {
		out := k.must("", "get", "rev", rev, "-o", held)
		if out != "||3" {
			return out, fmt.Errorf("not three and unheld")
		}
		return out, nil
	})
}
