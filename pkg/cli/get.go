package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"
)

// GetOptions say what Get and Watch read and how they print it.
type GetOptions struct {
	Namespace     string // "" means the client's namespace
	AllNamespaces bool
	Selector      string // label selector
	Output        string // "" (table), "wide", "yaml", "json" or "name"
	NoHeaders     bool
}

// Outputs are the values of GetOptions.Output.
var Outputs = []string{"json", "name", "wide", "yaml"}

// tableAccept asks for a server-side Table, with plain JSON as fallback
// for errors.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

// GetRequest is one resource type and the names asked of it (none: all).
type GetRequest struct {
	Mapping Mapping
	Names   []string
}

// ParseGetArgs reads get's and delete's arguments: "KIND[,KIND...] [NAME...]"
// or "KIND/NAME..." (kinds resolved as kubectl resolves them).
func (c *Client) ParseGetArgs(args []string) ([]GetRequest, error) {
	r, err := c.Resolver()
	if err != nil {
		return nil, err
	}
	if len(args) == 0 {
		var names []string
		for _, m := range r.Mappings() {
			names = append(names, m.Resource)
		}
		return nil, errors.New("name a resource type, e.g. `knbox get ksvc`; the server has: " + strings.Join(names, ", "))
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "/") }) {
		var reqs []GetRequest
		for _, a := range args {
			kind, name, ok := strings.Cut(a, "/")
			if !ok || kind == "" || name == "" {
				return nil, fmt.Errorf("%q: arguments in resource/name form must all have a resource type and a name", a)
			}
			m, err := r.Resolve(kind)
			if err != nil {
				return nil, err
			}
			i := slices.IndexFunc(reqs, func(q GetRequest) bool { return q.Mapping.Group == m.Group && q.Mapping.Resource == m.Resource })
			if i < 0 {
				reqs = append(reqs, GetRequest{Mapping: m})
				i = len(reqs) - 1
			}
			reqs[i].Names = append(reqs[i].Names, name)
		}
		return reqs, nil
	}
	ms, err := r.ResolveAll(args[0])
	if err != nil {
		return nil, err
	}
	reqs := make([]GetRequest, 0, len(ms))
	for _, m := range ms {
		reqs = append(reqs, GetRequest{Mapping: m, Names: args[1:]})
	}
	return reqs, nil
}

func (o GetOptions) check(reqs []GetRequest) error {
	if o.Output != "" && !slices.Contains(Outputs, o.Output) {
		return fmt.Errorf("unknown output format %q; use one of: %s", o.Output, strings.Join(Outputs, ", "))
	}
	named := slices.ContainsFunc(reqs, func(q GetRequest) bool { return len(q.Names) > 0 })
	if named && o.Selector != "" {
		return errors.New("names and a label selector (-l) cannot be given together")
	}
	if named && o.AllNamespaces {
		return errors.New("an object cannot be read by name across all namespaces (-A); give its namespace with -n")
	}
	return nil
}

func (c *Client) namespace(o GetOptions) string {
	switch {
	case o.AllNamespaces:
		return ""
	case o.Namespace != "":
		return o.Namespace
	}
	return c.Namespace
}

// Get prints the objects args name (see ParseGetArgs) to out, as tables
// by default, messages to errOut. It goes on after an object that cannot
// be read and returns the errors joined.
func (c *Client) Get(ctx context.Context, out, errOut io.Writer, args []string, o GetOptions) error {
	reqs, err := c.ParseGetArgs(args)
	if err != nil {
		return err
	}
	if err := o.check(reqs); err != nil {
		return err
	}
	switch o.Output {
	case "", "wide":
		return c.getTables(ctx, out, errOut, reqs, o)
	}
	return c.getObjects(ctx, out, reqs, o)
}

func (c *Client) getTables(ctx context.Context, out, errOut io.Writer, reqs []GetRequest, o GetOptions) error {
	ns := c.namespace(o)
	var errs []error
	printed := false
	for _, q := range reqs {
		t, err := c.Table(ctx, q, ns, o.Selector)
		if err != nil {
			errs = append(errs, err)
		}
		if t == nil || len(t.Rows) == 0 {
			continue
		}
		if printed {
			fmt.Fprintln(out)
		}
		opts := TableOptions{Wide: o.Output == "wide", WithNamespace: o.AllNamespaces && q.Mapping.Namespaced, NoHeaders: o.NoHeaders}
		if len(reqs) > 1 {
			opts.NamePrefix = q.Mapping.KindGroup() + "/"
		}
		if err := PrintTable(out, t, opts); err != nil {
			return err
		}
		printed = true
	}
	if !printed && len(errs) == 0 {
		fmt.Fprintln(errOut, noResources(reqs, ns))
	}
	return errors.Join(errs...)
}

// noResources is kubectl's message for an empty result.
func noResources(reqs []GetRequest, ns string) string {
	namespaced := slices.ContainsFunc(reqs, func(q GetRequest) bool { return q.Mapping.Namespaced })
	if ns == "" || !namespaced {
		return "No resources found"
	}
	return fmt.Sprintf("No resources found in %s namespace.", ns)
}

// Table asks the server for the Table of q's objects in ns ("" = all
// namespaces) matching selector: one row per named object (NotFound and
// other errors are joined into the error, the rows found are kept), or one
// per listed object.
func (c *Client) Table(ctx context.Context, q GetRequest, ns, selector string) (*metav1.Table, error) {
	if len(q.Names) == 0 {
		return c.tableRequest(ctx, q.Mapping, ns, "", selector, "")
	}
	var all *metav1.Table
	var errs []error
	for _, name := range q.Names {
		t, err := c.tableRequest(ctx, q.Mapping, ns, name, "", "")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if all == nil {
			all = t
		} else {
			all.Rows = append(all.Rows, t.Rows...)
		}
	}
	return all, errors.Join(errs...)
}

func (c *Client) tableRequest(ctx context.Context, m Mapping, ns, name, labels, fields string) (*metav1.Table, error) {
	rc, err := c.restFor(m, false)
	if err != nil {
		return nil, err
	}
	req := rc.Get().Resource(m.Resource).SetHeader("Accept", tableAccept)
	if m.Namespaced && ns != "" {
		req = req.Namespace(ns)
	}
	if name != "" {
		req = req.Name(name)
	}
	if labels != "" {
		req = req.Param("labelSelector", labels)
	}
	if fields != "" {
		req = req.Param("fieldSelector", fields)
	}
	res := req.Do(ctx)
	body, err := res.Raw()
	if err != nil {
		return nil, Human(res.Error()) // Error() decodes the server's Status
	}
	return decodeTable(body, m)
}

func decodeTable(body []byte, m Mapping) (*metav1.Table, error) {
	var t metav1.Table
	if err := json.Unmarshal(body, &t); err != nil {
		return nil, fmt.Errorf("read the table of %s: %w", m.Resource, err)
	}
	if t.Kind != "Table" {
		return nil, fmt.Errorf("the server sent a %q, not a Table, for %s", t.Kind, m.Resource)
	}
	return &t, nil
}

// Objects reads q's objects: the named ones (errors joined, the objects
// found kept) or the ones listed in ns ("" = all namespaces).
func (c *Client) Objects(ctx context.Context, q GetRequest, ns, selector string) ([]unstructured.Unstructured, string, error) {
	ri := c.dynamicFor(q.Mapping, ns)
	if len(q.Names) == 0 {
		l, err := ri.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, "", Human(err)
		}
		for i := range l.Items {
			if l.Items[i].GetKind() == "" {
				l.Items[i].SetGroupVersionKind(q.Mapping.GroupVersionKind())
			}
		}
		return l.Items, l.GetResourceVersion(), nil
	}
	var items []unstructured.Unstructured
	var errs []error
	for _, n := range q.Names {
		o, err := ri.Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			errs = append(errs, Human(err))
			continue
		}
		items = append(items, *o)
	}
	return items, "", errors.Join(errs...)
}

func (c *Client) getObjects(ctx context.Context, out io.Writer, reqs []GetRequest, o GetOptions) error {
	ns := c.namespace(o)
	var errs []error
	var items []map[string]interface{}
	for _, q := range reqs {
		objs, _, err := c.Objects(ctx, q, ns, o.Selector)
		if err != nil {
			errs = append(errs, err)
		}
		for _, obj := range objs {
			if o.Output == "name" {
				fmt.Fprintln(out, q.Mapping.Ref(obj.GetName()))
				continue
			}
			items = append(items, obj.Object)
		}
	}
	if o.Output == "name" {
		return errors.Join(errs...)
	}
	single := len(reqs) == 1 && len(reqs[0].Names) == 1
	var doc interface{}
	switch {
	case single && len(items) == 1:
		doc = items[0]
	case single:
		return errors.Join(errs...) // the one object asked for is missing
	default:
		if items == nil {
			items = []map[string]interface{}{}
		}
		doc = map[string]interface{}{"apiVersion": "v1", "kind": "List", "items": items,
			"metadata": map[string]interface{}{"resourceVersion": ""}}
	}
	if err := printObject(out, o.Output, doc); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// printObject writes v as YAML or as JSON indented as kubectl does.
func printObject(w io.Writer, format string, v interface{}) error {
	var b []byte
	var err error
	if format == "yaml" {
		b, err = yaml.Marshal(v)
	} else {
		b, err = json.MarshalIndent(v, "", "    ")
		b = append(b, '\n')
	}
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// Watch prints the objects of one kind (and at most one name) as Get
// does, then every change to them as it comes, until ctx ends.
func (c *Client) Watch(ctx context.Context, out, errOut io.Writer, args []string, o GetOptions) error {
	reqs, err := c.ParseGetArgs(args)
	if err != nil {
		return err
	}
	if err := o.check(reqs); err != nil {
		return err
	}
	if len(reqs) != 1 || len(reqs[0].Names) > 1 {
		return errors.New("watch (-w) takes one resource type and at most one name")
	}
	q := reqs[0]
	ns := c.namespace(o)
	name := ""
	if len(q.Names) == 1 {
		name = q.Names[0]
	}
	switch o.Output {
	case "", "wide":
		return c.watchTable(ctx, out, q.Mapping, ns, o, name)
	}
	return c.watchObjects(ctx, out, q.Mapping, ns, o, name)
}

// nameSelector is the field selector of one name ("" for none).
func nameSelector(name string) string {
	if name == "" {
		return ""
	}
	return "metadata.name=" + name
}

// notFound is the server's error for a missing object, for a watch of a
// name that lists nothing (as kubectl, which reads the object first).
func notFound(m Mapping, name string) error {
	return Human(apierrors.NewNotFound(schema.GroupResource{Group: m.Group, Resource: m.Resource}, name))
}

func (c *Client) watchTable(ctx context.Context, out io.Writer, m Mapping, ns string, o GetOptions, name string) error {
	fields := nameSelector(name)
	t, err := c.tableRequest(ctx, m, ns, "", o.Selector, fields)
	if err != nil {
		return err
	}
	if name != "" && len(t.Rows) == 0 {
		return notFound(m, name)
	}
	p := newTablePrinter(out, t.ColumnDefinitions, TableOptions{Wide: o.Output == "wide", WithNamespace: o.AllNamespaces && m.Namespaced, NoHeaders: o.NoHeaders})
	rows := rowsText(p, t)
	p.grow(rows)
	if len(rows) > 0 {
		if err := p.print(rows); err != nil {
			return err
		}
	}
	rv := t.ResourceVersion
	rc, err := c.restFor(m, true)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		req := rc.Get().Resource(m.Resource).SetHeader("Accept", tableAccept).
			Param("watch", "true").Param("resourceVersion", rv)
		if m.Namespaced && ns != "" {
			req = req.Namespace(ns)
		}
		if o.Selector != "" {
			req = req.Param("labelSelector", o.Selector)
		}
		if fields != "" {
			req = req.Param("fieldSelector", fields)
		}
		body, err := req.Stream(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return Human(err)
		}
		rv, err = readTableEvents(body, m, p, rv)
		body.Close()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readTableEvents prints the rows of a watch stream's Table events until
// the stream ends; it returns the last resourceVersion seen.
func readTableEvents(body io.Reader, m Mapping, p *tablePrinter, rv string) (string, error) {
	dec := json.NewDecoder(body)
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return rv, nil
			}
			return rv, fmt.Errorf("read the watch of %s: %w", m.Resource, err)
		}
		switch watch.EventType(ev.Type) {
		case watch.Bookmark:
			continue
		case watch.Error:
			var st metav1.Status
			if err := json.Unmarshal(ev.Object, &st); err != nil {
				return rv, fmt.Errorf("watch of %s failed", m.Resource)
			}
			return rv, Human(&apierrors.StatusError{ErrStatus: st})
		}
		t, err := decodeTable(ev.Object, m)
		if err != nil {
			return rv, err
		}
		if t.ResourceVersion != "" {
			rv = t.ResourceVersion
		}
		rows := rowsText(p, t)
		p.grow(rows)
		if err := p.print(rows); err != nil {
			return rv, err
		}
	}
}

func rowsText(p *tablePrinter, t *metav1.Table) [][]string {
	rows := make([][]string, 0, len(t.Rows))
	for _, r := range t.Rows {
		rows = append(rows, p.cells(r))
	}
	return rows
}

func (c *Client) watchObjects(ctx context.Context, out io.Writer, m Mapping, ns string, o GetOptions, name string) error {
	ri := c.watchDyn.Resource(m.GroupVersionResource())
	var rif interface {
		List(context.Context, metav1.ListOptions) (*unstructured.UnstructuredList, error)
		Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
	} = ri
	if m.Namespaced && ns != "" {
		rif = ri.Namespace(ns)
	}
	opts := metav1.ListOptions{LabelSelector: o.Selector, FieldSelector: nameSelector(name)}
	l, err := rif.List(ctx, opts)
	if err != nil {
		return Human(err)
	}
	if name != "" && len(l.Items) == 0 {
		return notFound(m, name)
	}
	first := true
	emit := func(obj *unstructured.Unstructured) error {
		if o.Output == "name" {
			_, err := fmt.Fprintln(out, m.Ref(obj.GetName()))
			return err
		}
		if !first && o.Output == "yaml" {
			if _, err := io.WriteString(out, "---\n"); err != nil {
				return err
			}
		}
		first = false
		if obj.GetKind() == "" {
			obj.SetGroupVersionKind(m.GroupVersionKind())
		}
		return printObject(out, o.Output, obj.Object)
	}
	for i := range l.Items {
		if err := emit(&l.Items[i]); err != nil {
			return err
		}
	}
	opts.ResourceVersion = l.GetResourceVersion()
	w, err := rif.Watch(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return Human(err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Bookmark:
				continue
			case watch.Error:
				return Human(apierrors.FromObject(ev.Object))
			}
			obj, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			if err := emit(obj); err != nil {
				return err
			}
		}
	}
}
