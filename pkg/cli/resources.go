package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// The reading and deleting commands (get, describe, delete, wait) name
// their objects as kubectl's do. This file turns their arguments into
// targets: TYPE[,TYPE...] [NAME...], TYPE/NAME..., or -f FILE, with -l,
// --field-selector, --all and -A. It is knbox's own small version of
// cli-runtime's resource builder, which the commands no longer use: that
// package imports kustomize (for -k), and every package linked into the
// knbox binary initialises and stays resident in `knbox serve` too.

// selection is one kind's objects that a command acts on.
type selection struct {
	mapping   *meta.RESTMapping
	namespace string   // "" for cluster-scoped kinds and with -A
	names     []string // nil: the objects the selectors match
	source    string   // the manifest document (-f) that named it, else ""
}

// namespaced says whether the target's kind is namespaced.
func (t selection) namespaced() bool { return t.mapping.Scope.Name() == meta.RESTScopeNameNamespace }

// kind names the target's kind as kubectl prints it: "service.serving.knative.dev", "configmap".
func (t selection) kind() string {
	return strings.ToLower(t.mapping.GroupVersionKind.GroupKind().String())
}

// selectFlags are the flags that choose objects.
type selectFlags struct {
	labels        string
	fields        string
	all           bool // --all (delete, wait): every object of the types
	allNamespaces bool // -A (get, describe)
	files         []string
	recursive     bool
}

func (f *selectFlags) validate() error {
	if _, err := labels.Parse(f.labels); err != nil {
		return fmt.Errorf("-l %q: %w", f.labels, err)
	}
	if _, err := fields.ParseSelector(f.fields); err != nil {
		return fmt.Errorf("--field-selector %q: %w", f.fields, err)
	}
	return nil
}

// listOptions are the selectors of a list or watch.
func (f *selectFlags) listOptions() metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: f.labels, FieldSelector: f.fields}
}

// targets turns a command's arguments into targets. Every type is
// resolved before anything is read, so an unknown type fails the command
// before it prints anything. With -f, the documents that cannot be read
// or mapped are the error and the others are returned with it: the
// command acts on those and fails at the end, as kubectl's -f does. showKind says whether several kinds were
// asked for (tables then name each row's kind).
func (s *session) targets(verb string, args []string, sel selectFlags, stdin io.Reader) (tt []selection, showKind bool, err error) {
	if err := sel.validate(); err != nil {
		return nil, false, err
	}
	if len(sel.files) > 0 {
		if len(args) > 0 {
			return nil, false, fmt.Errorf("give either -f FILE or resource types and names, not both (%s)", strings.Join(args, " "))
		}
		tt, err := s.fileTargets(verb, sel, stdin)
		kinds := map[schema.GroupVersionResource]bool{}
		for _, t := range tt {
			kinds[t.mapping.Resource] = true
		}
		return tt, len(kinds) > 1, err
	}
	if len(args) == 0 {
		return nil, false, errNoType(verb)
	}
	ns, _, err := s.conn.namespace()
	if err != nil {
		return nil, false, err
	}
	scope := func(m *meta.RESTMapping) string {
		if m.Scope.Name() != meta.RESTScopeNameNamespace || sel.allNamespaces {
			return ""
		}
		return ns
	}
	if strings.Contains(args[0], "/") {
		// TYPE/NAME...: every argument has the form.
		byType := map[string]int{}
		for _, a := range args {
			typ, name, ok := strings.Cut(a, "/")
			if !ok || typ == "" || name == "" || strings.Contains(name, "/") {
				return nil, false, fmt.Errorf("%q: give either TYPE NAME... or TYPE/NAME... arguments, not both", a)
			}
			m, err := s.mappingFor(typ)
			if err != nil {
				return nil, false, err
			}
			if sel.allNamespaces && m.Scope.Name() == meta.RESTScopeNameNamespace {
				return nil, false, errors.New("a named object is in one namespace: leave out -A (or use -n)")
			}
			key := m.Resource.String()
			if i, ok := byType[key]; ok {
				tt[i].names = append(tt[i].names, name)
				continue
			}
			byType[key] = len(tt)
			tt = append(tt, selection{mapping: m, namespace: scope(m), names: []string{name}})
		}
		return tt, len(tt) > 1, nil
	}
	names := args[1:]
	for _, n := range names {
		if strings.Contains(n, "/") {
			return nil, false, fmt.Errorf("%q: there is no need to give a resource type as a separate argument when passing arguments in TYPE/NAME form", n)
		}
	}
	types := strings.Split(args[0], ",")
	showKind = len(types) > 1
	seen := map[string]bool{}
	for _, typ := range types {
		if typ == "" {
			return nil, false, fmt.Errorf("%q: an empty resource type", args[0])
		}
		ms, err := s.mappingsFor(typ)
		if err != nil {
			return nil, false, err
		}
		if len(ms) != 1 {
			showKind = true
		}
		for _, m := range ms {
			if seen[m.Resource.String()] {
				continue
			}
			seen[m.Resource.String()] = true
			if len(names) > 0 && sel.allNamespaces && m.Scope.Name() == meta.RESTScopeNameNamespace {
				return nil, false, errors.New("a named object is in one namespace: leave out -A (or use -n)")
			}
			t := selection{mapping: m, namespace: scope(m)}
			if len(names) > 0 {
				t.names = append([]string(nil), names...)
			}
			tt = append(tt, t)
		}
	}
	return tt, showKind, nil
}

// fileTargets are the objects that the manifests of -f name, each a target
// of one name.
func (s *session) fileTargets(verb string, sel selectFlags, stdin io.Reader) ([]selection, error) {
	docs, err := ReadPaths(sel.files, sel.recursive, stdin)
	if err != nil {
		return nil, err
	}
	var tt []selection
	var errs []error
	for _, d := range docs {
		switch {
		case d.Skipped:
			continue
		case d.Err != nil:
			errs = append(errs, d.Err)
			continue
		}
		obj, m, err := s.objectFor(d, verb)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Where(), s.explain(err)))
			continue
		}
		tt = append(tt, selection{mapping: m, namespace: obj.GetNamespace(), names: []string{obj.GetName()}, source: d.Where()})
	}
	if len(tt) == 0 && len(errs) == 0 {
		return nil, fmt.Errorf("no objects in %v", sel.files)
	}
	return tt, errors.Join(errs...)
}

// objectFor maps a manifest document to its resource on the server, with
// the namespace the command means: the document's, else -n's or the
// context's; a document in another namespace than the one -n names is an
// error. The object returned is a copy with that namespace.
func (s *session) objectFor(d Document, verb string) (*unstructured.Unstructured, *meta.RESTMapping, error) {
	obj := d.Object.DeepCopy()
	gvk := obj.GroupVersionKind()
	mapper, err := s.conn.ToRESTMapper()
	if err != nil {
		return nil, nil, err
	}
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return nil, nil, fmt.Errorf("no matches for kind %q in version %q%s", gvk.Kind, gvk.GroupVersion(), s.kindHint(gvk))
	}
	if err != nil {
		return nil, nil, err
	}
	if obj.GetName() == "" {
		return nil, nil, fmt.Errorf("metadata.name: Required value (%s needs a name)", verb)
	}
	ns, explicit, err := s.conn.namespace()
	if err != nil {
		return nil, nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		switch own := obj.GetNamespace(); {
		case own == "":
			obj.SetNamespace(ns)
		case explicit && own != ns:
			return nil, nil, fmt.Errorf("the namespace of the object (%q) does not match the namespace given (%q): leave out -n or pass -n %s", own, ns, own)
		}
	} else {
		obj.SetNamespace("")
	}
	return obj, m, nil
}

// mappingsFor resolves a type argument: a category (such as "all") to its
// resources, anything else to one resource (see mappingFor).
func (s *session) mappingsFor(arg string) ([]*meta.RESTMapping, error) {
	if !strings.Contains(arg, ".") {
		d, err := s.conn.ToDiscoveryClient()
		if err != nil {
			return nil, err
		}
		// A name that is a resource's own wins over a category of that name.
		if m, err := s.mappingFor(arg); err == nil {
			return []*meta.RESTMapping{m}, nil
		}
		if grs, ok := restmapper.NewDiscoveryCategoryExpander(d).Expand(arg); ok && len(grs) > 0 {
			var ms []*meta.RESTMapping
			for _, gr := range grs {
				m, err := s.mappingFor(gr.String())
				if err != nil {
					return nil, err
				}
				ms = append(ms, m)
			}
			return ms, nil
		}
	}
	m, err := s.mappingFor(arg)
	if err != nil {
		return nil, err
	}
	return []*meta.RESTMapping{m}, nil
}

// mappingFor resolves a resource or kind argument ("ksvc", "services",
// "services.serving.knative.dev", "services.v1alpha1.serving.knative.dev",
// "Service", "Service.serving.knative.dev") as kubectl does: first as a
// resource (with short names), then as a kind.
func (s *session) mappingFor(arg string) (*meta.RESTMapping, error) {
	mapper, err := s.conn.ToRESTMapper()
	if err != nil {
		return nil, err
	}
	fullGVR, gr := schema.ParseResourceArg(arg)
	var gvk schema.GroupVersionKind
	if fullGVR != nil {
		gvk, _ = mapper.KindFor(*fullGVR)
	}
	if gvk.Empty() {
		gvk, _ = mapper.KindFor(gr.WithVersion(""))
	}
	if !gvk.Empty() {
		return mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	fullGVK, gk := schema.ParseKindArg(arg)
	if fullGVK == nil {
		k := gk.WithVersion("")
		fullGVK = &k
	}
	if !fullGVK.Empty() {
		if m, err := mapper.RESTMapping(fullGVK.GroupKind(), fullGVK.Version); err == nil {
			return m, nil
		}
	}
	m, err := mapper.RESTMapping(gk)
	if err != nil {
		if meta.IsNoMatchError(err) {
			// errors.go reads the name out of this wording ("did you mean").
			return nil, fmt.Errorf("the server doesn't have a resource type %q", gr.Resource)
		}
		return nil, err
	}
	return m, nil
}

// dynamicClient is the session's dynamic client.
func (s *session) dynamicClient() (dynamic.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dyn != nil {
		return s.dyn, nil
	}
	rc, err := s.conn.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	d, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	s.dyn = d
	return d, nil
}

// resource is the dynamic client of a target's kind in namespace ns.
func (s *session) resource(m *meta.RESTMapping, ns string) (dynamic.ResourceInterface, error) {
	d, err := s.dynamicClient()
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return d.Resource(m.Resource).Namespace(ns), nil
	}
	return d.Resource(m.Resource), nil
}

// restClient is a client for requests the dynamic client cannot make:
// those that ask for the server's tables.
func (s *session) restClient() (rest.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.raw != nil {
		return s.raw, nil
	}
	rc, err := s.conn.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	rc.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c, err := rest.UnversionedRESTClientFor(rc)
	if err != nil {
		return nil, err
	}
	s.raw = c
	return c, nil
}

// tableAccept asks for the server's table of the objects (the columns
// kubectl shows for the kind), else the objects themselves.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

// request is a GET of a target's collection (name "") or of one object.
func (s *session) request(t selection, name string, opts metav1.ListOptions) (*rest.Request, error) {
	c, err := s.restClient()
	if err != nil {
		return nil, err
	}
	gvr := t.mapping.Resource
	prefix := []string{"/apis", gvr.Group, gvr.Version}
	if gvr.Group == "" {
		prefix = []string{"/api", gvr.Version}
	}
	req := c.Get().AbsPath(prefix...)
	if t.namespaced() && t.namespace != "" {
		req = req.Namespace(t.namespace)
	}
	req = req.Resource(gvr.Resource)
	if name != "" {
		return req.Name(name), nil
	}
	if opts.LabelSelector != "" {
		req = req.Param("labelSelector", opts.LabelSelector)
	}
	if opts.FieldSelector != "" {
		req = req.Param("fieldSelector", opts.FieldSelector)
	}
	if opts.Watch {
		req = req.Param("watch", "true")
		if opts.ResourceVersion != "" {
			req = req.Param("resourceVersion", opts.ResourceVersion)
		}
	}
	return req, nil
}

// decodeTable reads a Table answer; its rows' objects are decoded
// (the table printer reads their namespaces and labels).
func decodeTable(body []byte) (*metav1.Table, error) {
	var tbl metav1.Table
	if err := json.Unmarshal(body, &tbl); err != nil {
		return nil, fmt.Errorf("decode the server's table: %w", err)
	}
	if tbl.Kind != "Table" {
		return nil, fmt.Errorf("the server answered with a %q, not a Table", tbl.Kind)
	}
	for i := range tbl.Rows {
		raw := tbl.Rows[i].Object.Raw
		if len(raw) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("decode the object of a table row: %w", err)
		}
		tbl.Rows[i].Object.Object = u
	}
	return &tbl, nil
}

// fetchTable gets a target's table: of one object (name) or of the
// objects its selectors match.
func (s *session) fetchTable(ctx context.Context, t selection, name string, opts metav1.ListOptions, full bool) (*metav1.Table, error) {
	req, err := s.request(t, name, opts)
	if err != nil {
		return nil, err
	}
	req = req.SetHeader("Accept", tableAccept)
	if full {
		req = req.Param("includeObject", string(metav1.IncludeObject))
	}
	body, err := req.Do(ctx).Raw()
	if err != nil {
		return nil, statusError(body, err)
	}
	return decodeTable(body)
}

// statusError is the server's Status in body if it holds one, else err.
// (The REST client decodes a Status only in the group version it was
// made for; the table requests have none.)
func statusError(body []byte, err error) error {
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Status == metav1.StatusFailure {
		return &apierrors.StatusError{ErrStatus: st}
	}
	return err
}
