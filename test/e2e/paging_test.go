package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// TestKubectlChunksAndEvents: kubectl reads lists in chunks (and a raw
// continue token works), and describe and get events show what the
// controllers recorded.
func TestKubectlChunksAndEvents(t *testing.T) {
	requireTool(t, "runc")
	k := newKubectl(t)

	// Chunked lists over 5 objects, pages of 2.
	for i := range 5 {
		k.must("", "create", "configmap", fmt.Sprint("cm", i), "--from-literal=k=v")
	}
	out := k.must("", "get", "configmaps", "--chunk-size=2", "-v=6")
	for i := range 5 {
		if !strings.Contains(out, fmt.Sprint("cm", i)) {
			t.Errorf("chunked get lacks cm%d:\n%s", i, out)
		}
	}
	if n := strings.Count(out, "continue="); n != 2 {
		t.Errorf("chunked get of 5 in pages of 2 sent %d continue requests, want 2:\n%s", n, out)
	}
	k.must("", "get", "configmaps", "--chunk-size=1", "-o", "name")
	var names []string
	path := "/api/v1/namespaces/default/configmaps?limit=2"
	for range 10 {
		var list struct {
			Metadata struct {
				Continue           string `json:"continue"`
				RemainingItemCount *int64 `json:"remainingItemCount"`
			} `json:"metadata"`
			Items []struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"items"`
		}
		raw := k.must("", "get", "--raw", path)
		if err := json.Unmarshal([]byte(raw), &list); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, raw)
		}
		for _, it := range list.Items {
			names = append(names, it.Metadata.Name)
		}
		if list.Metadata.Continue == "" {
			break
		}
		if list.Metadata.RemainingItemCount == nil {
			t.Errorf("%s: no remainingItemCount", path)
		}
		path = "/api/v1/namespaces/default/configmaps?limit=2&continue=" + url.QueryEscape(list.Metadata.Continue)
	}
	// kube-root-ca.crt may be there too.
	if got := strings.Join(names, ","); !strings.HasPrefix(got, "cm0,cm1,cm2,cm3,cm4") {
		t.Errorf("raw pages: %s", got)
	}
	if out, err := k.run("", "get", "--raw", "/api/v1/namespaces/default/configmaps?limit=2&continue=bad"); err == nil || !strings.Contains(out, "BadRequest") && !strings.Contains(out, "400") {
		t.Errorf("bad continue token: err=%v\n%s", err, out)
	}

	// Events of a Service that becomes ready, and of one whose image is
	// not there.
	reg := imagetest.StartRegistry(t)
	imagetest.PushGoImage(t, reg, "runtime-info:v1", "github.com/knbox/knbox/test/images/runtime-info", image.Config{})
	k.must(strings.Replace(helloYAML, "127.0.0.1:1/hello:v1", reg+"/runtime-info:v1", 1), "apply", "-f", "-")
	if out, err := k.run("", "wait", "ksvc/hello", "--for=condition=Ready", "--timeout=120s"); err != nil {
		t.Fatalf("hello not ready: %v\n%s\n%s", err, out, k.srv.logs())
	}
	broken := strings.Replace(strings.Replace(helloYAML, "name: hello", "name: broken", 1), "127.0.0.1:1/hello:v1", reg+"/absent:v1", 1)
	k.must(broken, "apply", "-f", "-")

	await := func(what string, args []string, wants ...string) string {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, err := k.run("", args...)
			missing := ""
			for _, w := range wants {
				if !strings.Contains(out, w) {
					missing = w
					break
				}
			}
			if err == nil && missing == "" {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %q missing (err %v):\n%s", what, missing, err, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	out = await("describe ksvc hello", []string{"describe", "ksvc", "hello"},
		"Events:", "Created", `Created Configuration "hello"`, `Created Route "hello"`, "service-controller")
	if strings.Contains(out, "Events:  <none>") {
		t.Errorf("describe ksvc shows no events:\n%s", out)
	}
	t.Logf("kubectl describe ksvc hello:\n%s", out)
	out = await("describe rev hello-00001", []string{"describe", "rev", "hello-00001"},
		"RevisionReady", "Revision becomes ready upon all resources being ready",
		"kubelet", "Created instance hello-00001-")
	t.Logf("kubectl describe rev hello-00001:\n%s", out[strings.Index(out, "Events:"):])
	// The instance's own events are about its Pod, as the kubelet's.
	out = await("describe pod", []string{"describe", "pod", "-l", "serving.knative.dev/revision=hello-00001"},
		"Pulling", "Pulled", "Created container user-container", "Started container user-container", "kubelet")
	t.Logf("kubectl describe pod:\n%s", out[strings.Index(out, "Events:"):])
	await("describe rev broken-00001", []string{"describe", "rev", "broken-00001"}, "Warning", "ContainerMissing")
	out = await("get events", []string{"get", "events"}, "LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE",
		"service/hello", "revision/hello-00001", "RevisionReady", "configuration/broken", "Warning")
	await("get events.events.k8s.io", []string{"get", "events.v1.events.k8s.io", "--field-selector", "regarding.name=hello", "-o", "name"}, "event.events.k8s.io/hello.")
	await("get events by field", []string{"get", "events", "--field-selector", "involvedObject.kind=Revision,type=Warning"}, "ContainerMissing")
	t.Logf("kubectl get events:\n%s", out)
}
