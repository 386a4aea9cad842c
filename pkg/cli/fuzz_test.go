package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func FuzzReadManifests(f *testing.F) {
	for _, s := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
		"---\napiVersion: v1\nkind: Secret\n---\n--- # x\nkind: X\n",
		`{"apiVersion":"v1","kind":"ConfigMap"}{"apiVersion":"v1"}`,
		"{apiVersion: v1, kind: ConfigMap}",
		"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap}\n- 1\n",
		"apiVersion: v1\nkind: ServiceList\nitems: 3\n",
		"- 1\n- 2\n",
		"a: &a [*a]\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {labels: {a: 1}, name: [x]}\n",
		"\xff\xfe\x00",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs := ReadManifests("in.yaml", data)
		for i, d := range docs {
			if d.Source != "in.yaml" || d.Index < 1 {
				t.Fatalf("document %d: source %q index %d", i, d.Source, d.Index)
			}
			if d.Err != nil {
				if d.Object != nil {
					t.Fatalf("document %d has both an object and an error", i)
				}
				if !strings.Contains(d.Err.Error(), fmt.Sprintf("in.yaml: document %d", d.Index)) {
					t.Fatalf("error %q does not name document %d", d.Err, d.Index)
				}
				continue
			}
			if d.Object == nil {
				t.Fatalf("document %d has neither an object nor an error", i)
			}
			b, err := json.Marshal(d.Object.Object)
			if err != nil {
				t.Fatalf("document %d does not encode: %v", i, err)
			}
			var back map[string]interface{}
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("document %d is not a JSON object: %v", i, err)
			}
			for _, k := range []string{"apiVersion", "kind"} {
				if s, ok := back[k].(string); !ok || s == "" {
					t.Fatalf("document %d: %s is %v", i, k, back[k])
				}
			}
			// What apply does with it next must not panic either.
			_ = d.Object.GetName()
			_ = d.Object.GetNamespace()
			if _, _, err := withLastApplied(d.Object); err != nil {
				t.Fatalf("document %d: %v", i, err)
			}
		}
	})
}
