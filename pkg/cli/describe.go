package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"
)

// describe is knbox's own and the same for every kind: the metadata a
// reader looks for first, the spec and the rest of the status as YAML,
// the status conditions as a table and the object's Events. kubectl's
// describers of core kinds (a Pod's containers in columns, a Secret's
// keys, ...) are not copied: knbox's kinds are Knative's and a few core
// ones, and YAML reads the same for all of them. Dropped flags: -k and
// --chunk-size.

// describeOptions are describe's flags.
type describeOptions struct {
	sel        selectFlags
	showEvents bool
}

func describeCommand(s *session) *cobra.Command {
	o := describeOptions{showEvents: true}
	cmd := &cobra.Command{
		Use:   "describe TYPE [NAME_PREFIX | -l label] | TYPE/NAME | -f FILE",
		Short: "Show an object in detail with its conditions and events, as kubectl describe does",
		Long: `Show objects in detail: their metadata, spec and status, the status
conditions as a table and the Events about them. TYPE NAME_PREFIX shows
the object of that name, else every object whose name starts with it.`,
		Example: `  knbox describe ksvc hello
  knbox describe rev -l serving.knative.dev/service=hello
  knbox describe route/hello`,
		SilenceUsage: true,
	}
	s.addFlags(cmd, true)
	fl := cmd.Flags()
	fl.StringVarP(&o.sel.labels, "selector", "l", "", "label selector, e.g. app=hello")
	fl.BoolVarP(&o.sel.allNamespaces, "all-namespaces", "A", false, "describe the objects of every namespace")
	fl.BoolVar(&o.showEvents, "show-events", true, "show the Events about the objects (when the server serves Events)")
	addFileFlags(cmd, &o.sel, "naming the objects to describe")
	cmd.RunE = s.run(func(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
		tt, _, fileErr := s.targets("describe", args, o.sel, streams.In)
		if len(tt) == 0 {
			return fileErr
		}
		ctx := orBackground(cmd.Context())
		// Events are shown only when the server serves them.
		events := o.showEvents && s.serves("", "v1", "events")
		errs := []error{fileErr}
		first := true
		for _, t := range tt {
			objs, err := s.describeTargets(ctx, t, o.sel)
			errs = append(errs, err)
			for _, obj := range objs {
				if !first {
					fmt.Fprintln(streams.Out)
				}
				first = false
				var evs []unstructured.Unstructured
				if events {
					evs = s.eventsOf(ctx, obj)
				}
				describeObject(streams.Out, obj, evs, time.Now())
			}
		}
		err := errors.Join(errs...)
		if first && err == nil {
			fmt.Fprintln(streams.ErrOut, noneFound(tt, o.sel))
		}
		return err
	})
	return cmd
}

// describeTargets are the objects a target names: by name, else by name
// prefix (kubectl's rule), else those the selectors match.
func (s *session) describeTargets(ctx context.Context, t selection, sel selectFlags) ([]*unstructured.Unstructured, error) {
	ri, err := s.resource(t.mapping, t.namespace)
	if err != nil {
		return nil, err
	}
	if t.names == nil {
		return s.targetObjects(ctx, t, sel, false)
	}
	var out []*unstructured.Unstructured
	var errs []error
	var list *unstructured.UnstructuredList
	for _, name := range t.names {
		obj, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			out = append(out, obj)
			continue
		}
		if !apierrors.IsNotFound(err) || t.source != "" {
			errs = append(errs, s.fromSource(t, err))
			continue
		}
		if list == nil {
			if list, err = ri.List(ctx, metav1.ListOptions{}); err != nil {
				return out, err
			}
		}
		n := len(out)
		for i := range list.Items {
			if strings.HasPrefix(list.Items[i].GetName(), name) {
				out = append(out, &list.Items[i])
			}
		}
		if len(out) == n {
			errs = append(errs, apierrors.NewNotFound(t.mapping.Resource.GroupResource(), name))
		}
	}
	return out, errors.Join(errs...)
}

// serves says whether discovery lists resource in group/version (false
// when discovery fails: the command itself then says why).
func (s *session) serves(group, version, resource string) bool {
	d, err := s.conn.ToDiscoveryClient()
	if err != nil {
		return false
	}
	l, err := d.ServerResourcesForGroupVersion(schema.GroupVersion{Group: group, Version: version}.String())
	if err != nil {
		return false
	}
	for _, r := range l.APIResources {
		if r.Name == resource {
			return true
		}
	}
	return false
}

// eventsOf lists the Events whose involvedObject is obj, oldest first
// (none when they cannot be read: describe shows what it has).
func (s *session) eventsOf(ctx context.Context, obj *unstructured.Unstructured) []unstructured.Unstructured {
	d, err := s.dynamicClient()
	if err != nil {
		return nil
	}
	sel := fields.Set{"involvedObject.name": obj.GetName(), "involvedObject.uid": string(obj.GetUID())}
	if obj.GetNamespace() != "" {
		sel["involvedObject.namespace"] = obj.GetNamespace()
	}
	ns := obj.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault // events of cluster-scoped objects
	}
	l, err := d.Resource(schema.GroupVersionResource{Version: "v1", Resource: "events"}).Namespace(ns).
		List(ctx, metav1.ListOptions{FieldSelector: fields.SelectorFromSet(sel).String()})
	if err != nil {
		return nil
	}
	sort.SliceStable(l.Items, func(i, j int) bool { return eventTime(l.Items[i]).Before(eventTime(l.Items[j])) })
	return l.Items
}

// eventTime is when an Event last happened.
func eventTime(e unstructured.Unstructured) time.Time {
	for _, f := range []string{"lastTimestamp", "eventTime", "firstTimestamp"} {
		if s, _, _ := unstructured.NestedString(e.Object, f); s != "" {
			if t, err := time.Parse(time.RFC3339, s); err == nil {
				return t
			}
		}
	}
	return e.GetCreationTimestamp().Time
}

// describeObject prints obj as describe shows it.
func describeObject(w io.Writer, obj *unstructured.Unstructured, events []unstructured.Unstructured, now time.Time) {
	tw := printers.GetNewTabWriter(w)
	defer tw.Flush()
	field := func(name, value string) { fmt.Fprintf(tw, "%s:\t%s\n", name, value) }
	field("Name", obj.GetName())
	if obj.GetNamespace() != "" {
		field("Namespace", obj.GetNamespace())
	}
	field("Kind", obj.GetKind())
	field("API Version", obj.GetAPIVersion())
	mapField(tw, "Labels", obj.GetLabels())
	annotations := obj.GetAnnotations()
	delete(annotations, LastAppliedAnnotation) // the manifest again, on one line
	mapField(tw, "Annotations", annotations)
	if ts := obj.GetCreationTimestamp(); !ts.IsZero() {
		field("Created", fmt.Sprintf("%s (%s ago)", ts.UTC().Format(time.RFC3339), age(ts.Time, now)))
	}
	if ts := obj.GetDeletionTimestamp(); ts != nil {
		field("Deleting since", ts.UTC().Format(time.RFC3339))
	}
	for _, ref := range obj.GetOwnerReferences() {
		field("Controlled By", ref.Kind+"/"+ref.Name)
	}
	tw.Flush()

	// Every other top-level field: spec, status, data, ...
	var keys []string
	for k := range obj.Object {
		switch k {
		case "apiVersion", "kind", "metadata":
			continue
		}
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return fieldOrder(keys[i]) < fieldOrder(keys[j]) || (fieldOrder(keys[i]) == fieldOrder(keys[j]) && keys[i] < keys[j])
	})
	var conditions []interface{}
	for _, k := range keys {
		v := obj.Object[k]
		if k == "status" {
			if st, ok := v.(map[string]interface{}); ok {
				if c, ok := st["conditions"].([]interface{}); ok {
					conditions = c
					st = copyWithout(st, "conditions")
					v = st
				}
				if len(st) == 0 {
					continue
				}
			}
		}
		if obj.GroupVersionKind().Group == "" && obj.GetKind() == "Secret" && (k == "data" || k == "stringData") {
			v = secretSizes(v, k == "data") // never the values
		}
		fmt.Fprintf(w, "%s:\n", title(k))
		writeYAML(w, v, "  ")
	}
	if conditions != nil {
		fmt.Fprintln(w, "Conditions:")
		describeConditions(w, conditions, now)
	}
	if events != nil {
		describeEvents(w, events, now)
	}
}

// fieldOrder puts spec first and status last among the top-level fields.
func fieldOrder(k string) int {
	switch k {
	case "spec":
		return 0
	case "status":
		return 2
	}
	return 1
}

func title(k string) string {
	if k == "" {
		return k
	}
	return strings.ToUpper(k[:1]) + k[1:]
}

func copyWithout(m map[string]interface{}, key string) map[string]interface{} {
	out := make(map[string]interface{}, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// secretSizes replaces a Secret's values with their sizes (of the
// decoded values, for data's base64).
func secretSizes(v interface{}, encoded bool) interface{} {
	m, ok := v.(map[string]interface{})
	if !ok {
		return "<hidden>"
	}
	out := make(map[string]interface{}, len(m))
	for k, x := range m {
		s, _ := x.(string)
		n := len(s)
		if b, err := base64.StdEncoding.DecodeString(s); encoded && err == nil {
			n = len(b)
		}
		out[k] = fmt.Sprintf("<%d bytes>", n)
	}
	return out
}

// mapField prints labels or annotations, one key=value per line.
func mapField(w io.Writer, name string, m map[string]string) {
	if len(m) == 0 {
		fmt.Fprintf(w, "%s:\t<none>\n", name)
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		head := name + ":"
		if i > 0 {
			head = ""
		}
		fmt.Fprintf(w, "%s\t%s=%s\n", head, k, m[k])
	}
}

// writeYAML prints v as YAML, each line indented.
func writeYAML(w io.Writer, v interface{}, indent string) {
	b, err := yaml.Marshal(v)
	if err != nil {
		fmt.Fprintf(w, "%s<%v>\n", indent, err)
		return
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		fmt.Fprintf(w, "%s%s\n", indent, line)
	}
}

// describeConditions prints status conditions as a table.
func describeConditions(w io.Writer, conds []interface{}, now time.Time) {
	tw := printers.GetNewTabWriter(w)
	defer tw.Flush()
	fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tMESSAGE\tAGE")
	for _, c := range conds {
		m, ok := c.(map[string]interface{})
		if !ok {
			continue
		}
		str := func(k string) string {
			s, _ := m[k].(string)
			if s == "" {
				return "-"
			}
			return s
		}
		since := "-"
		if ts, ok := m["lastTransitionTime"].(string); ok {
			if t, err := time.Parse(time.RFC3339, ts); err == nil {
				since = age(t, now)
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", str("type"), str("status"), str("reason"), oneLine(str("message")), since)
	}
}

// describeEvents prints the Events about an object.
func describeEvents(w io.Writer, events []unstructured.Unstructured, now time.Time) {
	if len(events) == 0 {
		fmt.Fprintln(w, "Events:\t<none>")
		return
	}
	fmt.Fprintln(w, "Events:")
	tw := printers.GetNewTabWriter(w)
	defer tw.Flush()
	fmt.Fprintln(tw, "  TYPE\tREASON\tAGE\tFROM\tMESSAGE")
	for _, e := range events {
		str := func(path ...string) string {
			s, _, _ := unstructured.NestedString(e.Object, path...)
			return s
		}
		from := str("source", "component")
		if from == "" {
			from = str("reportingComponent")
		}
		ago := age(eventTime(e), now)
		if n, _, _ := unstructured.NestedInt64(e.Object, "count"); n > 1 {
			ago = fmt.Sprintf("%s (x%d)", ago, n)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", str("type"), str("reason"), ago, from, oneLine(str("message")))
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// age is how long ago t was, as kubectl prints ages.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}
