package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docSummary is what a test checks of a document.
type docSummary struct {
	where string // Where()
	kind  string // kind/name, or the error's text fragment when err
	err   bool
}

func summarize(docs []Document) []docSummary {
	var out []docSummary
	for _, d := range docs {
		if d.Err != nil {
			out = append(out, docSummary{where: d.Where(), kind: d.Err.Error(), err: true})
			continue
		}
		if d.Skipped {
			out = append(out, docSummary{where: d.Where(), kind: "skipped"})
			continue
		}
		out = append(out, docSummary{where: d.Where(), kind: d.Object.GetKind() + "/" + d.Object.GetName()})
	}
	return out
}

func TestReadManifests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []docSummary
	}{{
		name: "one YAML document",
		in:   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
		want: []docSummary{{where: "f: document 1 (line 1)", kind: "ConfigMap/a"}},
	}, {
		name: "leading separator, comments, empty documents and CRLF",
		in: "---\r\n# a comment\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata:\r\n  name: a\r\n---\r\n\r\n--- # empty\r\n" +
			"# only a comment\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: b}\n...\n",
		want: []docSummary{
			{where: "f: document 1 (line 2)", kind: "ConfigMap/a"},
			{where: "f: document 2 (line 12)", kind: "Secret/b"},
		},
	}, {
		name: "dashes inside a document are not separators",
		in:   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: |\n    ----\n    ---x\n",
		want: []docSummary{{where: "f: document 1 (line 1)", kind: "ConfigMap/a"}},
	}, {
		name: "JSON object",
		in:   `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}`,
		want: []docSummary{{where: "f: document 1 (line 1)", kind: "ConfigMap/a"}},
	}, {
		name: "JSON stream with a broken tail",
		in:   "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\"}}\n\n{\"apiVersion\": \"v1\", \"kind\": \"Secret\"}\n{\"apiVersion\": ",
		want: []docSummary{
			{where: "f: document 1 (line 1)", kind: "ConfigMap/a"},
			{where: "f: document 2 (line 3)", kind: "Secret/"},
			{where: "f: document 3 (line 4)", kind: "f: document 3 (line 4): ", err: true},
		},
	}, {
		name: "YAML flow mapping that is not JSON",
		in:   "{apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n",
		want: []docSummary{{where: "f: document 1 (line 1)", kind: "ConfigMap/a"}},
	}, {
		name: "List items become documents",
		in:   "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n- kind: Secret\n- 3\n",
		want: []docSummary{
			{where: "f: document 1, item 1 (line 1)", kind: "ConfigMap/a"},
			{where: "f: document 1, item 2 (line 1)", kind: "f: document 1, item 2 (line 1): apiVersion: Required value", err: true},
			{where: "f: document 1, item 3 (line 1)", kind: "an item must be an object with apiVersion and kind, not a number", err: true},
		},
	}, {
		name: "errors name the document and go on",
		in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: Secret\n---\n- a\n- b\n---\napiVersion: v1\nkind: [x]\n---\n" +
			"apiVersion: v1\nkind: ConfigMap\nmetadata: nope\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels: {a: [1]}\n---\nkey: [unclosed\n---\n" +
			"apiVersion: v1\nkind: Secret\nmetadata: {name: z}\n",
		want: []docSummary{
			{where: "f: document 1 (line 1)", kind: "ConfigMap/a"},
			{where: "f: document 2 (line 5)", kind: "f: document 2 (line 5): apiVersion: Required value", err: true},
			{where: "f: document 3 (line 7)", kind: "f: document 3 (line 7): a document must be an object with apiVersion and kind, not a list", err: true},
			{where: "f: document 4 (line 10)", kind: "kind: must be a string, not a list", err: true},
			{where: "f: document 5 (line 13)", kind: "metadata: must be an object, not a string", err: true},
			{where: "f: document 6 (line 17)", kind: "metadata.labels[a]: must be a string, not a list", err: true},
			{where: "f: document 7 (line 22)", kind: "f: document 7 (line 22): ", err: true},
			{where: "f: document 8 (line 24)", kind: "Secret/z"},
		},
	}, {
		name: "documents that are no Kubernetes objects are skipped, not failed",
		in: "# knbox.yaml\napiAddr: 127.0.0.1:6443\nconfigMaps:\n  config-gc: {}\n---\n" + "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n" +
			"apiVersion: v1\nkind: List\nitems:\n- {metadata: {name: x}}\n",
		want: []docSummary{
			{where: "f: document 1 (line 1)", kind: "skipped"},
			{where: "f: document 2 (line 6)", kind: "ConfigMap/a"},
			{where: "f: document 3, item 1 (line 10)", kind: "apiVersion and kind: Required value", err: true},
		},
	}, {
		name: "nothing at all",
		in:   "\n# nothing\n---\n",
		want: nil,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := summarize(ReadManifests("f", []byte(tt.in)))
			if len(got) != len(tt.want) {
				t.Fatalf("got %d documents %+v, want %d %+v", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if g.where != w.where || g.err != w.err || (w.err && !strings.Contains(g.kind, w.kind)) || (!w.err && g.kind != w.kind) {
					t.Errorf("document %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestReadPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cm := func(name string) string { return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n" }
	write("b.yaml", cm("b1")+"---\n"+cm("b2"))
	write("a.JSON", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`)
	write("c.yml", cm("c"))
	write("notes.txt", cm("ignored"))
	write("sub/d.yaml", cm("ignored-too"))

	docs, err := ReadPaths([]string{dir, "-"}, false, strings.NewReader(cm("stdin")))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range docs {
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		got = append(got, filepath.Base(d.Source)+":"+d.Object.GetName())
	}
	want := "a.JSON:a b.yaml:b1 b.yaml:b2 c.yml:c stdin:stdin"
	if strings.Join(got, " ") != want {
		t.Errorf("got %v, want %s", got, want)
	}

	if _, err := ReadPaths([]string{filepath.Join(dir, "missing.yaml")}, false, nil); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing path: err = %v", err)
	}
	if _, err := ReadPaths([]string{"-", "-"}, false, strings.NewReader("")); err == nil {
		t.Error("stdin twice: no error")
	}
}
