package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// Action is what apply did to an object.
type Action string

// The actions, worded as kubectl prints them.
const (
	Created    Action = "created"
	Configured Action = "configured"
	Unchanged  Action = "unchanged"
)

// Result is the outcome of applying one document.
type Result struct {
	Doc    Document
	Ref    string // "service.serving.knative.dev/hello"; "" if unknown
	Action Action // "" when Err is set
	Err    error  // names the document and carries the server's message
}

// String is the line kubectl prints for a success:
// "service.serving.knative.dev/hello created".
func (r Result) String() string {
	if r.Err != nil {
		return r.Err.Error()
	}
	return r.Ref + " " + string(r.Action)
}

// Apply applies the documents in order, going on after a failure. The
// error joins every document's failure (nil when all succeeded).
func (c *Client) Apply(ctx context.Context, docs []Document) ([]Result, error) {
	var results []Result
	var errs []error
	for _, d := range docs {
		r := c.ApplyOne(ctx, d)
		results = append(results, r)
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	return results, errors.Join(errs...)
}

// ApplyOne creates the document's object if it is absent, and otherwise
// patches it with kubectl's client-side apply: a JSON merge patch from the
// three-way merge of the last applied configuration (the annotation), the
// document and the live object. A patch that changes nothing on the server
// (same resourceVersion) counts as unchanged.
func (c *Client) ApplyOne(ctx context.Context, d Document) Result {
	res := Result{Doc: d}
	if d.Err != nil {
		res.Err = d.Err
		return res
	}
	fail := func(err error) Result {
		res.Err = fmt.Errorf("%s: %w", d.Where(), Human(err))
		return res
	}
	r, err := c.Resolver()
	if err != nil {
		return fail(err)
	}
	obj := d.Object.DeepCopy()
	gvk := schema.FromAPIVersionAndKind(obj.GetAPIVersion(), obj.GetKind())
	m, err := r.ForKind(gvk)
	if err != nil {
		return fail(err)
	}
	name := obj.GetName()
	if name == "" {
		return fail(errors.New("metadata.name: Required value (apply needs a name)"))
	}
	res.Ref = m.Ref(name)
	ns := ""
	if m.Namespaced {
		ns = obj.GetNamespace()
		switch {
		case ns == "":
			ns = c.Namespace
			obj.SetNamespace(ns)
		case c.EnforceNamespace && ns != c.Namespace:
			return fail(fmt.Errorf("the namespace of the object (%q) does not match the namespace given (%q): leave out -n or pass -n %s", ns, c.Namespace, ns))
		}
	} else {
		obj.SetNamespace("")
	}
	modified, modObj, err := withLastApplied(obj)
	if err != nil {
		return fail(err)
	}
	ri := c.dynamicFor(m, ns)
	for attempt := 0; ; attempt++ {
		live, err := ri.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = ri.Create(ctx, modObj, metav1.CreateOptions{FieldManager: FieldManager})
			if apierrors.IsAlreadyExists(err) && attempt == 0 {
				continue // created meanwhile: patch it instead
			}
			if err != nil {
				return fail(err)
			}
			res.Action = Created
			return res
		}
		if err != nil {
			return fail(err)
		}
		action, err := c.patch(ctx, ri, live, modified)
		if err != nil {
			return fail(err)
		}
		res.Action = action
		return res
	}
}

func (c *Client) patch(ctx context.Context, ri dynamic.ResourceInterface, live *unstructured.Unstructured, modified []byte) (Action, error) {
	current, err := json.Marshal(live.Object)
	if err != nil {
		return "", err
	}
	original := []byte(live.GetAnnotations()[LastAppliedAnnotation])
	patch, err := threeWayMergePatch(original, modified, current)
	if err != nil {
		return "", err
	}
	if string(patch) == "{}" {
		return Unchanged, nil
	}
	out, err := ri.Patch(ctx, live.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return "", err
	}
	if out.GetResourceVersion() != "" && out.GetResourceVersion() == live.GetResourceVersion() {
		return Unchanged, nil // e.g. lists the server had filled in with defaults
	}
	return Configured, nil
}
