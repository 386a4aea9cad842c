package cli

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestThreeWayMergePatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                        string
		original, modified, current string
		want                        string
	}{{
		name:     "nothing changed",
		original: `{"a":1,"m":{"x":"y"}}`, modified: `{"a":1,"m":{"x":"y"}}`, current: `{"a":1,"m":{"x":"y","d":"defaulted"},"status":{}}`,
		want: `{}`,
	}, {
		name:     "a value changes, a field is added",
		original: `{"a":1}`, modified: `{"a":2,"b":{"c":true}}`, current: `{"a":1}`,
		want: `{"a":2,"b":{"c":true}}`,
	}, {
		name:     "a field dropped from the manifest is deleted",
		original: `{"a":1,"m":{"x":"1","y":"2"}}`, modified: `{"m":{"x":"1"}}`, current: `{"a":1,"m":{"x":"1","y":"2"}}`,
		want: `{"a":null,"m":{"y":null}}`,
	}, {
		name:     "fields others set are kept",
		original: `{"m":{"x":"1"}}`, modified: `{"m":{"x":"1"}}`, current: `{"m":{"x":"1","other":"2"},"extra":3}`,
		want: `{}`,
	}, {
		name:     "a field changed by others is set back",
		original: `{"m":{"x":"1"}}`, modified: `{"m":{"x":"1"}}`, current: `{"m":{"x":"changed"}}`,
		want: `{"m":{"x":"1"}}`,
	}, {
		name:     "lists are replaced whole",
		original: `{"l":[1,2]}`, modified: `{"l":[1,3]}`, current: `{"l":[1,2]}`,
		want: `{"l":[1,3]}`,
	}, {
		name:     "no last applied configuration: nothing is deleted",
		original: ``, modified: `{"a":1}`, current: `{"a":1,"b":2}`,
		want: `{}`,
	}, {
		name:     "an explicit null deletes only what was applied",
		original: `{"a":1}`, modified: `{"a":null,"b":null}`, current: `{"a":1,"b":2}`,
		want: `{"a":null}`,
	}, {
		name:     "nulls inside a new object are dropped",
		original: `{}`, modified: `{"m":{"x":null,"y":1}}`, current: `{}`,
		want: `{"m":{"y":1}}`,
	}, {
		name:     "an object replaced by a value",
		original: `{"m":{"x":1}}`, modified: `{"m":"flat"}`, current: `{"m":{"x":1}}`,
		want: `{"m":"flat"}`,
	}, {
		name:     "numbers compare by value",
		original: `{"n":1}`, modified: `{"n":1.0}`, current: `{"n":1}`,
		want: `{}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := threeWayMergePatch([]byte(tt.original), []byte(tt.modified), []byte(tt.current))
			if err != nil {
				t.Fatal(err)
			}
			if !jsonSame(t, string(got), tt.want) {
				t.Errorf("patch = %s, want %s", got, tt.want)
			}
		})
	}
	if _, err := threeWayMergePatch([]byte(`{`), []byte(`{}`), []byte(`{}`)); err == nil {
		t.Error("broken last-applied configuration: no error")
	}
}

func jsonSame(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y interface{}
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return jsonEqual(x, y)
}

func TestWithLastApplied(t *testing.T) {
	t.Parallel()
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]interface{}{"name": "a", "annotations": map[string]interface{}{
			"keep": "me", LastAppliedAnnotation: "stale",
		}},
		"data": map[string]interface{}{"k": "<v>"},
	}}
	modified, o, err := withLastApplied(obj)
	if err != nil {
		t.Fatal(err)
	}
	// The configuration is the object without the annotation, encoded as
	// kubectl encodes it (sorted keys, HTML escaped, a final newline).
	wantCfg := `{"apiVersion":"v1","data":{"k":"\u003cv\u003e"},"kind":"ConfigMap","metadata":{"annotations":{"keep":"me"},"name":"a"}}` + "\n"
	if got := o.GetAnnotations()[LastAppliedAnnotation]; got != wantCfg {
		t.Errorf("annotation = %q, want %q", got, wantCfg)
	}
	if o.GetAnnotations()["keep"] != "me" {
		t.Error("other annotations lost")
	}
	if obj.GetAnnotations()[LastAppliedAnnotation] != "stale" {
		t.Error("the input object was changed")
	}
	var back map[string]interface{}
	if err := json.Unmarshal(modified, &back); err != nil || !jsonEqual(back, o.Object) {
		t.Errorf("modified JSON %s does not match the object (%v)", modified, err)
	}

	// Without annotations, kubectl records an empty annotations object.
	_, o, err = withLastApplied(&unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]interface{}{"name": "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := o.GetAnnotations()[LastAppliedAnnotation], `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":{},"name":"b"}}`+"\n"; got != want {
		t.Errorf("annotation = %q, want %q", got, want)
	}
}
