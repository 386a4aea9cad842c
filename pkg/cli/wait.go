package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/jsonpath"
)

// wait is knbox's own: it lists each object and then watches it (the
// dynamic client's watch, from the list's resourceVersion) until the
// condition holds, the timeout passes or the command is interrupted.
// Dropped from kubectl wait: --local, -o and -k.

// waitOptions are wait's flags.
type waitOptions struct {
	sel     selectFlags
	forSpec string
	timeout time.Duration
}

func waitCommand(s *session) *cobra.Command {
	o := waitOptions{timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "wait TYPE/NAME... | TYPE [-l label | --all] | -f FILE --for=condition=NAME[=VALUE]|delete|jsonpath='{EXPR}'=VALUE",
		Short: "Wait until objects meet a condition, as kubectl wait does",
		Long: `Wait until every named object meets the condition: a status condition
(--for=condition=Ready, --for=condition=Ready=False), its deletion
(--for=delete), or a JSONPath expression's value (--for=jsonpath='{.status.url}'=URL;
without =VALUE, that the expression has a value).
It fails when --timeout (default 30s) passes first.`,
		Example: `  knbox wait ksvc/hello --for=condition=Ready
  knbox wait ksvc --all --for=condition=Ready --timeout=2m
  knbox wait ksvc/hello --for=delete`,
		SilenceUsage: true,
	}
	s.addFlags(cmd, true)
	fl := cmd.Flags()
	fl.StringVar(&o.forSpec, "for", "", "the condition: condition=NAME[=VALUE], delete, or jsonpath='{EXPR}'[=VALUE]")
	fl.DurationVar(&o.timeout, "timeout", o.timeout, "how long to wait (0: look once)")
	fl.StringVarP(&o.sel.labels, "selector", "l", "", "label selector, e.g. app=hello")
	fl.StringVar(&o.sel.fields, "field-selector", "", "field selector, e.g. metadata.name=hello")
	fl.BoolVar(&o.sel.all, "all", false, "every object of the types")
	fl.BoolVarP(&o.sel.allNamespaces, "all-namespaces", "A", false, "the objects of every namespace")
	addFileFlags(cmd, &o.sel, "naming the objects to wait for")
	cmd.RunE = s.run(func(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
		cond, err := parseFor(o.forSpec)
		if err != nil {
			return err
		}
		tt, _, err := s.targets("wait", args, o.sel, streams.In)
		if len(tt) == 0 {
			return err
		}
		if err := needNames("wait for", tt, o.sel); err != nil {
			return err
		}
		ctx, cancel := interruptible(cmd.Context())
		defer cancel()
		return errors.Join(err, s.waitAll(ctx, tt, o.sel, cond, o.timeout, streams.Out))
	})
	return cmd
}

// needNames refuses a target without names unless a selector or --all
// chooses its objects.
func needNames(verb string, tt []selection, sel selectFlags) error {
	for _, t := range tt {
		if t.names == nil && sel.labels == "" && sel.fields == "" && !sel.all {
			return fmt.Errorf("name the objects to %s: TYPE NAME..., TYPE/NAME..., or TYPE with -l SELECTOR or --all, or -f FILE", verb)
		}
		if t.names != nil && sel.all {
			return fmt.Errorf("--all chooses every object of the type: name no objects with it")
		}
	}
	return nil
}

// waitFor is a parsed --for.
type waitFor struct {
	deleted   bool
	condition string // a status condition's type
	value     string // the condition's status, or the JSONPath's value
	hasValue  bool   // jsonpath: a value was given
	expr      string // the JSONPath expression, in braces
	path      *jsonpath.JSONPath
}

// parseFor parses --for: delete, condition=NAME[=VALUE] (VALUE default
// True) or jsonpath=EXPR[=VALUE], EXPR in braces or not ({.a.b}, .a.b),
// possibly in single quotes.
func parseFor(s string) (waitFor, error) {
	bad := func(why string) (waitFor, error) {
		return waitFor{}, fmt.Errorf("unrecognized condition: %q (%s; want --for=condition=NAME[=VALUE], --for=delete or --for=jsonpath='{EXPR}'[=VALUE])", s, why)
	}
	switch {
	case s == "":
		return waitFor{}, errors.New("give the condition to wait for: --for=condition=NAME[=VALUE], --for=delete or --for=jsonpath='{EXPR}'[=VALUE]")
	case strings.EqualFold(s, "delete"):
		return waitFor{deleted: true}, nil
	case strings.HasPrefix(s, "condition="):
		name, value, ok := strings.Cut(strings.TrimPrefix(s, "condition="), "=")
		if !ok {
			value = "True"
		}
		if name == "" || value == "" {
			return bad("a condition needs a name and, if given, a value")
		}
		return waitFor{condition: name, value: value}, nil
	case strings.HasPrefix(s, "jsonpath="):
		expr, value, hasValue, err := splitJSONPathFor(strings.TrimPrefix(s, "jsonpath="))
		if err != nil {
			return bad(err.Error())
		}
		rel, err := relaxedJSONPath(expr)
		if err != nil {
			return bad(err.Error())
		}
		jp := jsonpath.New("for").AllowMissingKeys(true)
		if err := jp.Parse(rel); err != nil {
			return bad(err.Error())
		}
		return waitFor{expr: rel, path: jp, value: value, hasValue: hasValue}, nil
	}
	return bad("unknown kind of condition")
}

// splitJSONPathFor splits EXPR[=VALUE]: the expression ends at its closing
// quote or brace, else at the first = outside brackets, parentheses and quotes.
func splitJSONPathFor(s string) (expr, value string, hasValue bool, err error) {
	end := -1
	switch {
	case strings.HasPrefix(s, "'"):
		i := strings.Index(s[1:], "'")
		if i < 0 {
			return "", "", false, errors.New("the expression's quote is not closed")
		}
		expr, end = s[1:i+1], i+2
	case strings.HasPrefix(s, "{"):
		depth := 0
		for i, r := range s {
			if r == '{' {
				depth++
			} else if r == '}' {
				depth--
				if depth == 0 {
					end = i + 1
					break
				}
			}
		}
		if end < 0 {
			return "", "", false, errors.New("the expression's brace is not closed")
		}
		expr = s[:end]
	default:
		depth := 0
		var quote rune
		end = len(s)
	scan:
		for i, r := range s {
			switch {
			case quote != 0:
				if r == quote {
					quote = 0
				}
			case r == '"' || r == '\'':
				quote = r
			case r == '[' || r == '(':
				depth++
			case r == ']' || r == ')':
				depth--
			case r == '=' && depth == 0:
				end = i
				break scan
			}
		}
		expr = s[:end]
	}
	rest := s[end:]
	switch {
	case rest == "":
	case strings.HasPrefix(rest, "="):
		value, hasValue = rest[1:], true
		if value == "" {
			return "", "", false, errors.New("an empty value after =")
		}
	default:
		return "", "", false, fmt.Errorf("%q after the expression", rest)
	}
	if expr == "" {
		return "", "", false, errors.New("an empty expression")
	}
	return expr, value, hasValue, nil
}

// met says whether obj meets the condition (the delete condition is
// met by absence, see waitObject).
func (w waitFor) met(obj *unstructured.Unstructured) (bool, error) {
	switch {
	case w.deleted:
		return false, nil
	case w.path != nil:
		res, err := w.path.FindResults(obj.Object)
		if err != nil {
			return false, nil // not there yet
		}
		var vals []interface{}
		for _, r := range res {
			for _, v := range r {
				for v.Kind() == reflect.Interface && !v.IsNil() {
					v = v.Elem()
				}
				if v.IsValid() {
					vals = append(vals, v.Interface())
				}
			}
		}
		if !w.hasValue {
			return len(vals) > 0, nil
		}
		switch {
		case len(vals) == 0:
			return false, nil
		case len(vals) > 1:
			return false, fmt.Errorf("--for=jsonpath: %s gives %d values; give an expression that gives one", w.expr, len(vals))
		}
		switch vals[0].(type) {
		case map[string]interface{}, []interface{}:
			return false, fmt.Errorf("--for=jsonpath: %s gives an object or a list; give an expression that gives a string, a number or a boolean", w.expr)
		}
		return fmt.Sprint(vals[0]) == w.value, nil
	}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	gen := obj.GetGeneration()
	if og, ok, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration"); ok && og < gen {
		return false, nil // the status is of an older spec
	}
	for _, c := range conds {
		m, ok := c.(map[string]interface{})
		if !ok {
			continue
		}
		if t, _ := m["type"].(string); !strings.EqualFold(t, w.condition) {
			continue
		}
		if og, ok := m["observedGeneration"].(int64); ok && og < gen {
			return false, nil
		}
		st, _ := m["status"].(string)
		return strings.EqualFold(st, w.value), nil
	}
	return false, nil
}

// waitAll waits for every object of the targets, one after the other,
// all within timeout, and prints a line per object that meets the
// condition.
func (s *session) waitAll(ctx context.Context, tt []selection, sel selectFlags, cond waitFor, timeout time.Duration, out io.Writer) error {
	once := timeout <= 0
	if !once {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	type object struct {
		t    selection
		name string
		uid  types.UID
	}
	var objs []object
	for _, t := range tt {
		if t.names != nil {
			for _, n := range t.names {
				objs = append(objs, object{t: t, name: n})
			}
			continue
		}
		found, err := s.targetObjects(ctx, t, sel, false)
		if err != nil {
			return err
		}
		for _, o := range found {
			t := t
			t.namespace = o.GetNamespace()
			objs = append(objs, object{t: t, name: o.GetName(), uid: o.GetUID()})
		}
	}
	if len(objs) == 0 {
		return errors.New("no matching resources found")
	}
	var errs []error
	for _, o := range objs {
		ri, err := s.resource(o.t.mapping, o.t.namespace)
		if err != nil {
			return err
		}
		printed, err := waitObject(ctx, ri, o.t.mapping.Resource.GroupResource(), o.name, o.uid, cond, once)
		switch {
		case err == nil:
			if printed {
				fmt.Fprintf(out, "%s/%s condition met\n", o.t.kind(), o.name)
			}
		case errors.Is(err, errNotMet):
			what := o.t.mapping.Resource.Resource + "/" + o.name
			if once {
				errs = append(errs, fmt.Errorf("condition not met for %s", what))
			} else {
				errs = append(errs, fmt.Errorf("timed out waiting for the condition on %s", what))
			}
		default:
			errs = append(errs, s.fromSource(o.t, err))
		}
	}
	return errors.Join(errs...)
}

// errNotMet: the condition did not hold in time.
var errNotMet = errors.New("condition not met")

// waitObject waits until the object meets cond (with once, it looks
// once). For the delete condition the object is gone when it is absent
// or another object (uid, if known) has its name. It says whether the
// condition was met after the object was seen (kubectl prints nothing
// for an object already gone); errNotMet when time ran out first.
func waitObject(ctx context.Context, ri dynamic.ResourceInterface, gr schema.GroupResource, name string, uid types.UID, cond waitFor, once bool) (printed bool, err error) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	seen := false
	for {
		l, err := ri.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			if ctx.Err() != nil {
				return false, errNotMet
			}
			return false, err
		}
		var obj *unstructured.Unstructured
		if len(l.Items) > 0 && (uid == "" || l.Items[0].GetUID() == uid) {
			obj = &l.Items[0]
		}
		switch {
		case obj == nil && cond.deleted:
			return seen, nil
		case obj == nil && !seen:
			return false, apierrors.NewNotFound(gr, name)
		case obj != nil:
			seen = true
			if uid == "" {
				uid = obj.GetUID()
			}
			ok, err := cond.met(obj)
			if err != nil || ok {
				return ok, err
			}
		}
		if once {
			return false, errNotMet
		}
		w, err := ri.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: l.GetResourceVersion()})
		if err != nil {
			if ctx.Err() != nil {
				return false, errNotMet
			}
			return false, err
		}
		done, ok, err := watchUntil(ctx, w, uid, cond)
		w.Stop()
		if done {
			return ok, err
		}
		if ctx.Err() != nil {
			return false, errNotMet
		}
		// The server ended the watch: list and watch again.
	}
}

// watchUntil reads a watch until cond is met (done, met) or it fails
// (done, err); not done when the watch ended first.
func watchUntil(ctx context.Context, w watch.Interface, uid types.UID, cond waitFor) (done, met bool, err error) {
	for {
		select {
		case <-ctx.Done():
			return true, false, errNotMet
		case ev, open := <-w.ResultChan():
			if !open {
				return false, false, nil
			}
			obj, isObj := ev.Object.(*unstructured.Unstructured)
			switch ev.Type {
			case watch.Error:
				return false, false, nil // list and watch again
			case watch.Deleted:
				if cond.deleted && isObj && (uid == "" || obj.GetUID() == uid) {
					return true, true, nil
				}
			case watch.Added, watch.Modified:
				if !isObj || (uid != "" && obj.GetUID() != uid) {
					continue
				}
				if ok, err := cond.met(obj); err != nil || ok {
					return true, ok, err
				}
			}
		}
	}
}
