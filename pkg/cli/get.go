package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// get is knbox's own: the server's tables (as kubectl asks for them),
// cli-runtime's printers for the other formats, the dynamic client for
// objects. Tables and watches go through a plain REST client: the dynamic
// client cannot ask for tables, and one watch reader serves both. Dropped from kubectl get (and from knbox get when
// it was kubectl's): -k (kustomize), --output-watch-events, --chunk-size
// (the whole list comes in one answer) and --server-print=false (the
// client-side printing of servers that serve no tables).

// getOptions are get's flags.
type getOptions struct {
	print          printFlags
	sel            selectFlags
	watch          bool
	watchOnly      bool
	ignoreNotFound bool
}

func getCommand(s *session) *cobra.Command {
	var o getOptions
	cmd := &cobra.Command{
		Use:   "get TYPE[,TYPE...] [NAME...] | TYPE/NAME... | -f FILE [flags]",
		Short: "Show objects, as kubectl get does",
		Long: `Show objects as the server's tables (default and -o wide) or in any of
kubectl's output formats.

TYPE is a resource's plural, singular or short name or its kind (ksvc,
service, services.serving.knative.dev, rev, rt, cfg, ns, cm, ...), or a
category: "all" is every Knative Serving kind. knbox api-resources lists
them.`,
		Example: `  knbox get ksvc
  knbox get all -A
  knbox get ksvc hello -o yaml
  knbox get ksvc -o jsonpath='{.items[*].status.url}'
  knbox get rev -o custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status --sort-by=.metadata.creationTimestamp
  knbox get rev -l serving.knative.dev/service=hello -w`,
		SilenceUsage: true,
	}
	s.addFlags(cmd, true)
	o.print.addFlags(cmd.Flags())
	fl := cmd.Flags()
	fl.BoolVarP(&o.watch, "watch", "w", false, "after listing or getting the objects, print their changes as they happen")
	fl.BoolVar(&o.watchOnly, "watch-only", false, "print the objects' changes, without listing or getting them first")
	fl.BoolVar(&o.ignoreNotFound, "ignore-not-found", false, "succeed when a named object does not exist")
	fl.StringVar(&o.sel.fields, "field-selector", "", "field selector, e.g. metadata.name=hello")
	fl.BoolVarP(&o.sel.allNamespaces, "all-namespaces", "A", false, "list the objects of every namespace")
	fl.StringVarP(&o.sel.labels, "selector", "l", "", "label selector, e.g. app=hello,tier!=web")
	addFileFlags(cmd, &o.sel, "naming the objects to get")
	cmd.RunE = s.run(func(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) error {
		if err := o.print.validate(); err != nil {
			return err
		}
		tt, showKind, err := s.targets("get", args, o.sel, streams.In)
		if len(tt) == 0 {
			return err
		}
		o.print.showKind = o.print.showKind || showKind
		if o.watch || o.watchOnly {
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd.Context())
			defer cancel()
			return s.getWatch(ctx, tt, o, streams)
		}
		return errors.Join(err, s.get(cmd.Context(), tt, o, streams))
	})
	return cmd
}

// addFileFlags gives cmd -f and -R.
func addFileFlags(cmd *cobra.Command, sel *selectFlags, what string) {
	cmd.Flags().StringArrayVarP(&sel.files, "filename", "f", nil, "manifest file, directory or - (stdin) "+what+"; repeatable")
	cmd.Flags().BoolVarP(&sel.recursive, "recursive", "R", false, "also read the manifests in the subdirectories of a directory given with -f")
}

// errNoType is the error of a reading command given nothing to read.
func errNoType(verb string) error {
	return fmt.Errorf("name a resource type, e.g. `knbox %s ksvc`, or give -f FILE; `knbox api-resources` lists the types", verb)
}

// get prints the targets once; the error joins what failed (a missing
// name) after what could be printed.
func (s *session) get(ctx context.Context, tt []selection, o getOptions, streams genericiooptions.IOStreams) error {
	ctx = orBackground(ctx)
	var errs []error
	found := 0
	if o.print.table() {
		var last schema.GroupVersionResource
		for _, t := range tt {
			tbl, err := s.targetTable(ctx, t, o)
			errs = append(errs, err)
			if tbl == nil || len(tbl.Rows) == 0 {
				continue
			}
			if found > 0 && t.mapping.Resource != last && !o.print.noHeaders {
				fmt.Fprintln(streams.Out)
			}
			last = t.mapping.Resource
			found += len(tbl.Rows)
			if err := tablePrinter(o.print, t).PrintObj(tbl, streams.Out); err != nil {
				return err
			}
		}
	} else {
		pr, err := o.print.objectPrinter()
		if err != nil {
			return err
		}
		var objs []*unstructured.Unstructured
		for _, t := range tt {
			got, err := s.targetObjects(ctx, t, o.sel, o.ignoreNotFound)
			errs = append(errs, err)
			objs = append(objs, got...)
		}
		if o.print.sortBy != "" {
			maps := make([]map[string]interface{}, len(objs))
			for i, obj := range objs {
				maps[i] = obj.Object
			}
			order, err := sortObjects(o.print.sortBy, maps)
			if err != nil {
				return err
			}
			sorted := make([]*unstructured.Unstructured, len(objs))
			for i, j := range order {
				sorted[i] = objs[j]
			}
			objs = sorted
		}
		found = len(objs)
		single := len(tt) == 1 && len(tt[0].names) == 1
		if len(objs) > 0 || !isName(pr) {
			if err := printObjects(pr, objs, single, streams.Out); err != nil {
				return err
			}
		}
	}
	err := errors.Join(errs...)
	if found == 0 && err == nil && o.print.table() {
		fmt.Fprintln(streams.ErrOut, noneFound(tt, o.sel))
	}
	return err
}

// noneFound is the note for an empty answer, worded as kubectl's.
func noneFound(tt []selection, sel selectFlags) string {
	if len(tt) == 1 && tt[0].namespaced() && tt[0].namespace != "" && !sel.allNamespaces {
		return fmt.Sprintf("No resources found in %s namespace.", tt[0].namespace)
	}
	return "No resources found"
}

func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// tablePrinter prints a target's tables as -o and its companions say.
func tablePrinter(p printFlags, t selection) printers.ResourcePrinter {
	return printers.NewTablePrinter(printers.PrintOptions{
		NoHeaders:     p.noHeaders,
		Wide:          p.output == "wide",
		WithNamespace: t.namespaced() && t.namespace == "",
		WithKind:      p.showKind,
		Kind:          t.mapping.GroupVersionKind.GroupKind(),
		ShowLabels:    p.showLabels,
		ColumnLabels:  p.labelColumns,
	})
}

// targetTable is a target's table: the list's, or the rows of its named
// objects merged (a missing name is an error, unless --ignore-not-found),
// sorted by --sort-by.
func (s *session) targetTable(ctx context.Context, t selection, o getOptions) (*metav1.Table, error) {
	full := o.print.sortBy != ""
	if t.names == nil {
		tbl, err := s.fetchTable(ctx, t, "", o.sel.listOptions(), full)
		if err != nil {
			return nil, err
		}
		return tbl, sortTable(o.print.sortBy, tbl)
	}
	var merged *metav1.Table
	var errs []error
	for _, name := range t.names {
		tbl, err := s.fetchTable(ctx, t, name, metav1.ListOptions{}, full)
		if apierrors.IsNotFound(err) && o.ignoreNotFound {
			continue
		}
		if err != nil {
			errs = append(errs, s.fromSource(t, err))
			continue
		}
		if merged == nil {
			merged = tbl
		} else {
			merged.Rows = append(merged.Rows, tbl.Rows...)
		}
	}
	if merged != nil {
		if err := sortTable(o.print.sortBy, merged); err != nil {
			return nil, err
		}
	}
	return merged, errors.Join(errs...)
}

// fromSource prefixes err with the manifest document that named t.
func (s *session) fromSource(t selection, err error) error {
	if t.source == "" {
		return err
	}
	return fmt.Errorf("%s: %w", t.source, s.explain(err))
}

// sortTable sorts a table's rows by --sort-by in their objects.
func sortTable(sortBy string, tbl *metav1.Table) error {
	if sortBy == "" || len(tbl.Rows) < 2 {
		return nil
	}
	maps := make([]map[string]interface{}, len(tbl.Rows))
	for i, r := range tbl.Rows {
		if u, ok := r.Object.Object.(*unstructured.Unstructured); ok {
			maps[i] = u.Object
		} else {
			maps[i] = map[string]interface{}{}
		}
	}
	order, err := sortObjects(sortBy, maps)
	if err != nil {
		return err
	}
	rows := make([]metav1.TableRow, len(order))
	for i, j := range order {
		rows[i] = tbl.Rows[j]
	}
	tbl.Rows = rows
	return nil
}

// targetObjects are a target's objects: those of the list, or the named
// ones (a missing one is an error unless ignoreNotFound).
func (s *session) targetObjects(ctx context.Context, t selection, sel selectFlags, ignoreNotFound bool) ([]*unstructured.Unstructured, error) {
	ri, err := s.resource(t.mapping, t.namespace)
	if err != nil {
		return nil, err
	}
	if t.names == nil {
		l, err := ri.List(ctx, sel.listOptions())
		if err != nil {
			return nil, err
		}
		out := make([]*unstructured.Unstructured, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out, nil
	}
	var out []*unstructured.Unstructured
	var errs []error
	for _, name := range t.names {
		obj, err := ri.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && ignoreNotFound:
		case err != nil:
			errs = append(errs, s.fromSource(t, err))
		default:
			out = append(out, obj)
		}
	}
	return out, errors.Join(errs...)
}

// getWatch lists the target (unless --watch-only), then prints its
// changes until ctx ends. Like kubectl, it watches one type.
func (s *session) getWatch(ctx context.Context, tt []selection, o getOptions, streams genericiooptions.IOStreams) error {
	if len(tt) != 1 {
		return errors.New("-w watches one resource type: name one")
	}
	t := tt[0]
	opts := o.sel.listOptions()
	switch len(t.names) {
	case 0:
	case 1:
		f := fields.OneTermEqualSelector("metadata.name", t.names[0])
		if opts.FieldSelector != "" {
			f = fields.AndSelectors(f, fields.ParseSelectorOrDie(opts.FieldSelector))
		}
		opts.FieldSelector = f.String()
	default:
		return errors.New("-w watches one object or a list: name one object, or none")
	}
	var pr printers.ResourcePrinter
	if o.print.table() {
		pr = tablePrinter(o.print, t)
	} else {
		var err error
		if pr, err = o.print.objectPrinter(); err != nil {
			return err
		}
	}
	accept := "application/json"
	if o.print.table() {
		accept = tableAccept
	}
	// The list: its objects (unless --watch-only) and where the watch starts.
	req, err := s.request(t, "", opts)
	if err != nil {
		return err
	}
	body, err := req.SetHeader("Accept", accept).Do(ctx).Raw()
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return statusError(body, err)
	}
	var rv string
	if o.print.table() {
		tbl, err := decodeTable(body)
		if err != nil {
			return err
		}
		rv = tbl.ResourceVersion
		if len(t.names) == 1 && len(tbl.Rows) == 0 && !o.watchOnly {
			return apierrors.NewNotFound(t.mapping.Resource.GroupResource(), t.names[0])
		}
		if !o.watchOnly && len(tbl.Rows) > 0 {
			if err := sortTable(o.print.sortBy, tbl); err != nil {
				return err
			}
			if err := pr.PrintObj(tbl, streams.Out); err != nil {
				return err
			}
		}
	} else {
		l := &unstructured.UnstructuredList{}
		if err := l.UnmarshalJSON(body); err != nil {
			return fmt.Errorf("decode the list: %w", err)
		}
		rv = l.GetResourceVersion()
		if len(t.names) == 1 && len(l.Items) == 0 && !o.watchOnly {
			return apierrors.NewNotFound(t.mapping.Resource.GroupResource(), t.names[0])
		}
		if !o.watchOnly {
			for i := range l.Items {
				if err := pr.PrintObj(&l.Items[i], streams.Out); err != nil {
					return err
				}
			}
		}
	}
	return s.watchRaw(ctx, t, opts, rv, accept, func(typ string, raw []byte) (string, error) {
		if o.print.table() {
			tbl, err := decodeTable(raw)
			if err != nil {
				return "", err
			}
			for _, r := range tbl.Rows {
				if u, ok := r.Object.Object.(*unstructured.Unstructured); ok {
					rv = u.GetResourceVersion()
				}
			}
			return rv, pr.PrintObj(tbl, streams.Out)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return "", err
		}
		return u.GetResourceVersion(), pr.PrintObj(u, streams.Out)
	})
}

// watchRaw watches a target from resourceVersion rv with the given Accept
// and hands each event's type and object to fn, which returns the
// object's resourceVersion. When the server ends the watch, it watches
// again from the last one; it returns nil when ctx ends.
func (s *session) watchRaw(ctx context.Context, t selection, opts metav1.ListOptions, rv, accept string, fn func(typ string, obj []byte) (string, error)) error {
	for {
		opts.Watch, opts.ResourceVersion = true, rv
		req, err := s.request(t, "", opts)
		if err != nil {
			return err
		}
		stream, err := req.SetHeader("Accept", accept).Stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		var n int
		rv, n, err = readEvents(stream, rv, fn)
		stream.Close()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if n == 0 {
			// Ended without an event: do not hammer the server.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

// readEvents reads watch events until the stream ends.
func readEvents(r io.Reader, rv string, fn func(typ string, obj []byte) (string, error)) (last string, n int, err error) {
	dec := json.NewDecoder(r)
	for ; ; n++ {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			return rv, n, nil // the server ended the watch (or the connection broke): watch again
		}
		switch ev.Type {
		case "ERROR":
			var st metav1.Status
			if err := json.Unmarshal(ev.Object, &st); err == nil && st.Code == 410 {
				return rv, n, errors.New("the watch fell too far behind the server's changes (resource version expired): run the command again")
			}
			return rv, n, &apierrors.StatusError{ErrStatus: st}
		case "BOOKMARK":
			continue
		}
		got, err := fn(ev.Type, ev.Object)
		if err != nil {
			return rv, n, err
		}
		if got != "" {
			rv = got
		}
	}
}
