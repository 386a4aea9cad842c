package cli

import (
	"encoding/json"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// LastAppliedAnnotation holds the configuration last applied to an object,
// as kubectl's client-side apply keeps it.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// withLastApplied returns the JSON of obj with the last-applied annotation
// set to obj's own configuration (without that annotation), encoded as
// kubectl encodes it, so the annotations written by knbox and by kubectl
// compare equal for the same manifest. obj is not changed.
func withLastApplied(obj *unstructured.Unstructured) ([]byte, *unstructured.Unstructured, error) {
	o := obj.DeepCopy()
	ann := o.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	delete(ann, LastAppliedAnnotation)
	// kubectl keeps an empty annotations object here; so do we, for the
	// same text.
	o.SetAnnotations(ann)
	cfg, err := json.Marshal(o.Object)
	if err != nil {
		return nil, nil, err
	}
	ann[LastAppliedAnnotation] = string(cfg) + "\n"
	o.SetAnnotations(ann)
	modified, err := json.Marshal(o.Object)
	if err != nil {
		return nil, nil, err
	}
	return modified, o, nil
}

// threeWayMergePatch computes the JSON merge patch (RFC 7386) that client-side
// apply sends: it sets what modified adds or changes relative to current,
// and deletes what original (the last applied configuration) had and
// modified no longer has. Fields that neither original nor modified name
// (defaults, status, fields written by others) are left alone. Lists are
// atomic, as in every JSON merge patch. original may be empty.
func threeWayMergePatch(original, modified, current []byte) ([]byte, error) {
	var o, m, c map[string]interface{}
	if len(original) > 0 {
		if err := utiljson.Unmarshal(original, &o); err != nil {
			return nil, fmt.Errorf("last applied configuration: %w", err)
		}
	}
	if err := utiljson.Unmarshal(modified, &m); err != nil {
		return nil, fmt.Errorf("new configuration: %w", err)
	}
	if err := utiljson.Unmarshal(current, &c); err != nil {
		return nil, fmt.Errorf("live object: %w", err)
	}
	patch := changes(c, m)
	mergeInto(patch, deletions(o, m))
	return json.Marshal(patch)
}

// changes is the part of the merge patch from current to modified that
// adds or changes fields; it never deletes.
func changes(current, modified map[string]interface{}) map[string]interface{} {
	p := map[string]interface{}{}
	for k, mv := range modified {
		if mv == nil {
			continue // an explicit null deletes only what was applied before
		}
		cv, ok := current[k]
		mm, mIsMap := mv.(map[string]interface{})
		cm, cIsMap := cv.(map[string]interface{})
		switch {
		case ok && mIsMap && cIsMap:
			if sub := changes(cm, mm); len(sub) > 0 {
				p[k] = sub
			}
		case !ok || !jsonEqual(cv, mv):
			p[k] = withoutNulls(mv)
		}
	}
	return p
}

// deletions is the part of the merge patch from original to modified that
// deletes fields (nulls only).
func deletions(original, modified map[string]interface{}) map[string]interface{} {
	p := map[string]interface{}{}
	for k, ov := range original {
		mv, ok := modified[k]
		if !ok || mv == nil {
			if ov != nil {
				p[k] = nil
			}
			continue
		}
		om, oIsMap := ov.(map[string]interface{})
		mm, mIsMap := mv.(map[string]interface{})
		if oIsMap && mIsMap {
			if sub := deletions(om, mm); len(sub) > 0 {
				p[k] = sub
			}
		}
	}
	return p
}

// mergeInto adds the fields of src to dst, merging objects both hold.
func mergeInto(dst, src map[string]interface{}) {
	for k, sv := range src {
		dm, dIsMap := dst[k].(map[string]interface{})
		sm, sIsMap := sv.(map[string]interface{})
		if dIsMap && sIsMap {
			mergeInto(dm, sm)
			continue
		}
		if _, ok := dst[k]; !ok {
			dst[k] = sv
		}
	}
}

// withoutNulls drops null fields of objects (not of lists' elements),
// which in a merge patch would delete rather than set.
func withoutNulls(v interface{}) interface{} {
	m, ok := v.(map[string]interface{})
	if !ok {
		return v
	}
	out := make(map[string]interface{}, len(m))
	for k, x := range m {
		if x != nil {
			out[k] = withoutNulls(x)
		}
	}
	return out
}

// jsonEqual compares decoded JSON values; numbers compare by value whether
// they decoded as int64 or float64.
func jsonEqual(a, b interface{}) bool {
	switch x := a.(type) {
	case map[string]interface{}:
		y, ok := b.(map[string]interface{})
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	case []interface{}:
		y, ok := b.([]interface{})
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case int64:
		switch y := b.(type) {
		case int64:
			return x == y
		case float64:
			return float64(x) == y
		}
		return false
	case float64:
		switch y := b.(type) {
		case int64:
			return x == float64(y)
		case float64:
			return x == y
		}
		return false
	}
	return reflect.DeepEqual(a, b)
}
