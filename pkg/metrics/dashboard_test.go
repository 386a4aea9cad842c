package metrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/router"
)

// The Grafana dashboard in contrib/grafana queries only metrics knbox
// serves.
func TestDashboardQueriesServedMetrics(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "contrib", "grafana", "knbox.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("knbox.json: %v", err)
	}

	// A registry with every collector holding a sample.
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"memory/knbox/p/memory.usage_in_bytes": "1\n",
		"cpuacct/knbox/p/cpuacct.usage":        "1\n",
	})
	m := New(Options{})
	m.count(&router.RequestInfo{Namespace: "n", Revision: "r", Instance: "p", Code: 200, QueueWait: time.Millisecond})
	m.ObserveColdStart("n", "r", time.Second)
	m.ObserveAPIRequest(APIRequest{Verb: "GET", Code: 200})
	m.ObserveRequest(&router.RequestInfo{}) // dropped counter exists anyway
	if err := m.AddAutoscaler(func() []Scale { return []Scale{{Namespace: "n", Revision: "r"}} }); err != nil {
		t.Fatal(err)
	}
	if err := m.AddStore(func() int { return 1 }); err != nil {
		t.Fatal(err)
	}
	if err := m.AddQueues(func() []Queue { return []Queue{{Namespace: "n", Revision: "r"}} }); err != nil {
		t.Fatal(err)
	}
	if err := m.AddInstances(func() []Instance { return []Instance{{ID: "p", Namespace: "n", Revision: "r"}} }, Cgroups{Root: root}); err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, line := range strings.Split(scrape(t, m), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		served[name] = true
	}
	metric := regexp.MustCompile(`\b(?:revision|activator|autoscaler|knbox|container|kube|apiserver|process|go)_[a-z_]+\b`)
	isLabel := map[string]bool{labelNamespace: true, labelService: true, labelConfiguration: true, labelRevision: true, labelCode: true, labelCodeClass: true}
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range metric.FindAllString(tg.Expr, -1) {
				if isLabel[name] {
					continue
				}
				n++
				if !served[name] {
					t.Errorf("panel %q queries %s, which knbox does not serve", p.Title, name)
				}
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d metric references found in the dashboard", n)
	}
}
