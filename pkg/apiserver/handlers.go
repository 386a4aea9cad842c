package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"knative.dev/pkg/apis"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/store"
)

// maxJSONPatchOps bounds the operations of one JSON patch, as Kubernetes does.
const maxJSONPatchOps = 10000

func (s *Server) key(k *Kind, namespace, name string) store.Key {
	return store.Key{Resource: k.storeResource(), Namespace: namespace, Name: name}
}

// decodeStored decodes a stored value into the storage type.
func decodeStored(k *Kind, value []byte) (runtime.Object, error) {
	if k.StoreAs != nil {
		obj, err := decodeStored(k.StoreAs.Kind, value)
		if err != nil {
			return nil, err
		}
		return k.StoreAs.From(obj)
	}
	obj := k.New()
	if err := json.Unmarshal(value, obj); err != nil {
		return nil, fmt.Errorf("decode stored %s: %w", k.Kind, err)
	}
	return obj, nil
}

// encodeStored encodes a storage-version object for the store.
func encodeStored(k *Kind, obj runtime.Object) ([]byte, error) {
	if k.StoreAs != nil {
		stored, err := k.StoreAs.To(obj)
		if err != nil {
			return nil, err
		}
		return encodeStored(k.StoreAs.Kind, stored)
	}
	obj.GetObjectKind().SetGroupVersionKind(k.GroupVersion().WithKind(k.Kind))
	return json.Marshal(obj)
}

// toVersion converts a stored object into the version the client asked for.
func toVersion(k *Kind, version string, obj runtime.Object) (runtime.Object, error) {
	if version == k.Version {
		obj.GetObjectKind().SetGroupVersionKind(k.GroupVersion().WithKind(k.Kind))
		return obj, nil
	}
	av := k.Alt[version]
	out, err := av.FromStorage(obj.DeepCopyObject())
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s %q cannot be shown as %s/%s: %v; read it as %s",
			k.Kind, accessor(obj).Name, k.Group, version, err, k.GroupVersion()))
	}
	out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Group: k.Group, Version: version, Kind: k.Kind})
	return out, nil
}

func (s *Server) getStored(k *Kind, namespace, name string) (runtime.Object, store.Entry, error) {
	e, err := s.store.Get(s.key(k, namespace, name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, e, apierrors.NewNotFound(k.GroupResource(), name)
	}
	if err != nil {
		return nil, e, err
	}
	obj, err := decodeStored(k, e.Value)
	return obj, e, err
}

func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, apierrors.NewBadRequest("the request has no body")
	}
	b, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d bytes", tooLarge.Limit))
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("read request body: %v", err))
	}
	return b, nil
}

func isDryRun(r *http.Request) (bool, error) {
	vs := r.URL.Query()["dryRun"]
	for _, v := range vs {
		if v != "All" {
			return false, apierrors.NewBadRequest(fmt.Sprintf("dryRun: unsupported value %q (supported: All)", v))
		}
	}
	return len(vs) > 0, nil
}

// decodeBodyAs decodes a create or update body in the request's version
// and returns it in the storage version, and also as the client wrote it
// (for error paths in its terms). base is the stored object (nil on
// create), which converting some versions needs.
func (s *Server) decodeBodyAs(r *http.Request, req request, data []byte, base runtime.Object) (runtime.Object, runtime.Object, []string, error) {
	k := req.kind
	tm, err := typeMeta(data)
	if err != nil {
		return nil, nil, nil, apierrors.NewBadRequest(fmt.Sprintf("the request body is not a JSON object: %v", err))
	}
	wantAPIVersion := schema.GroupVersion{Group: k.Group, Version: req.version}.String()
	if tm.APIVersion != "" && tm.APIVersion != wantAPIVersion {
		return nil, nil, nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", tm.APIVersion, wantAPIVersion))
	}
	if tm.Kind != "" && tm.Kind != k.Kind {
		return nil, nil, nil, apierrors.NewBadRequest(fmt.Sprintf("the kind in the data (%s) does not match the expected kind (%s) of %s", tm.Kind, k.Kind, k.Resource))
	}
	fv, err := parseFieldValidation(r)
	if err != nil {
		return nil, nil, nil, err
	}
	var into runtime.Object
	av := k.Alt[req.version]
	if av != nil {
		into = av.New()
	} else {
		into = k.New()
	}
	unknown, err := decodeStrict(data, into)
	if err != nil {
		return nil, nil, nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", k.Kind, req.version, k.Kind, err))
	}
	var warns []string
	if len(unknown) > 0 {
		switch fv {
		case validationStrict:
			return nil, nil, nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: strict decoding error: %s", k.Kind, req.version, k.Kind, joinMsgs(unknown)))
		case validationWarn:
			warns = unknown
		}
	}
	if av == nil {
		return into, into, warns, nil
	}
	name := accessor(into).Name
	if err := av.Validate(into); err != nil {
		return nil, nil, nil, asInvalid(k, name, err, nil)
	}
	out, err := av.ToStorage(into, base)
	if err != nil {
		return nil, nil, nil, asInvalid(k, name, err, nil)
	}
	return out, into, warns, nil
}

func joinMsgs(ms []string) string {
	b, _ := json.Marshal(ms)
	if len(ms) == 1 {
		return ms[0]
	}
	return string(b)
}

// asInvalid makes a 422 of a Knative FieldError, or a 400 of another error.
func asInvalid(k *Kind, name string, err error, rewrite func(string) string) error {
	var fe *apis.FieldError
	if errors.As(err, &fe) {
		if errs := admission.FieldErrors(fe, rewrite); len(errs) > 0 {
			return invalid(k.GroupKind(), name, errs)
		}
		return nil
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return err
	}
	return apierrors.NewBadRequest(err.Error())
}

// pathRewrite returns the field path translation for errors about an
// object written in req's version.
func pathRewrite(req request, written runtime.Object) func(string) string {
	av := req.kind.Alt[req.version]
	if av == nil || av.FieldPath == nil || written == nil {
		return nil
	}
	return func(p string) string { return av.FieldPath(written, p) }
}

// respond writes objs (stored versions) in the negotiated form. single
// says whether the response is one object rather than a list.
func (s *Server) respond(w http.ResponseWriter, code int, out output, req request, stored runtime.Object) error {
	if out.table != nil {
		return s.respondList(w, out, req, []runtime.Object{stored}, metav1.ListMeta{})
	}
	v, err := toVersion(req.kind, req.version, stored)
	if err != nil {
		return err
	}
	if out.partial != "" {
		writeObject(w, code, out, partialMetadata(v, out.partial))
		return nil
	}
	writeObject(w, code, out, v)
	return nil
}

func (s *Server) respondList(w http.ResponseWriter, out output, req request, stored []runtime.Object, lm metav1.ListMeta) error {
	k := req.kind
	objs := make([]runtime.Object, 0, len(stored))
	for _, o := range stored {
		v, err := toVersion(k, req.version, o.DeepCopyObject())
		if err != nil {
			return err
		}
		objs = append(objs, v)
	}
	switch {
	case out.table != nil:
		writeObject(w, http.StatusOK, out, s.toTable(k, objs, stored, lm, *out.table))
		return nil
	case out.partial != "":
		l := &metav1.PartialObjectMetadataList{ListMeta: lm}
		l.APIVersion, l.Kind = "meta.k8s.io/"+out.partial, "PartialObjectMetadataList"
		for _, o := range objs {
			l.Items = append(l.Items, *partialMetadata(o, out.partial))
		}
		writeObject(w, http.StatusOK, out, l)
		return nil
	}
	var list runtime.Object
	if av := k.Alt[req.version]; av != nil {
		list = av.NewList()
	} else {
		list = k.NewList()
	}
	if err := meta.SetList(list, objs); err != nil {
		return err
	}
	la, err := meta.ListAccessor(list)
	if err != nil {
		return err
	}
	la.SetResourceVersion(lm.ResourceVersion)
	la.SetContinue(lm.Continue)
	la.SetRemainingItemCount(lm.RemainingItemCount)
	list.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Group: k.Group, Version: req.version, Kind: k.Kind + "List"})
	writeObject(w, http.StatusOK, out, list)
	return nil
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request, req request) error {
	out, err := negotiate(r)
	if err != nil {
		return err
	}
	obj, _, err := s.getStored(req.kind, req.namespace, req.name)
	if err != nil {
		return err
	}
	return s.respond(w, http.StatusOK, out, req, obj)
}

// selector is a parsed label and field selector.
type selector struct {
	labels labels.Selector
	fields fields.Selector
}

func parseSelector(r *http.Request, k *Kind) (selector, error) {
	q := r.URL.Query()
	ls, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		return selector{}, apierrors.NewBadRequest(fmt.Sprintf("unable to parse requirement: %v", err))
	}
	fs, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		return selector{}, apierrors.NewBadRequest(fmt.Sprintf("invalid field selector: %v", err))
	}
	for _, req := range fs.Requirements() {
		switch req.Field {
		case "metadata.name", "metadata.namespace":
			continue
		}
		if _, ok := k.FieldLabels[req.Field]; !ok {
			return selector{}, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	return selector{labels: ls, fields: fs}, nil
}

func (sel selector) matches(k *Kind, obj runtime.Object) bool {
	m := accessor(obj)
	if !sel.labels.Empty() && !sel.labels.Matches(labels.Set(m.Labels)) {
		return false
	}
	if sel.fields.Empty() {
		return true
	}
	set := fields.Set{"metadata.name": m.Name}
	if k.Namespaced {
		set["metadata.namespace"] = m.Namespace
	}
	for f, get := range k.FieldLabels {
		set[f] = get(obj)
	}
	return sel.fields.Matches(set)
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request, req request) error {
	out, err := negotiate(r)
	if err != nil {
		return err
	}
	sel, err := parseSelector(r, req.kind)
	if err != nil {
		return err
	}
	across := req.kind.Namespaced && req.namespace == ""
	cur := s.store.Revision()
	pg, err := parsePaging(r.URL.Query(), req.namespace, across, cur)
	if err != nil {
		return err
	}
	var objs []runtime.Object
	if !sel.labels.Empty() || !sel.fields.Empty() {
		// The limit counts matching objects, which the store learns by
		// asking: decode once, keep the decoded object.
		pg.opts.Match = func(e store.Entry) (bool, error) {
			obj, err := decodeStored(req.kind, e.Value)
			if err != nil {
				return false, err
			}
			if !sel.matches(req.kind, obj) {
				return false, nil
			}
			objs = append(objs, obj)
			return true, nil
		}
	}
	if s.store.LabelIndexed() {
		pg.opts.Labels = indexTerms(sel.labels)
	}
	page, err := s.store.ListPage(req.kind.storeResource(), req.namespace, pg.opts)
	if err != nil {
		return pageError(err, pg, across, cur)
	}
	if pg.opts.Match == nil {
		objs = make([]runtime.Object, 0, len(page.Entries))
		for _, e := range page.Entries {
			obj, err := decodeStored(req.kind, e.Value)
			if err != nil {
				return err
			}
			objs = append(objs, obj)
		}
	}
	lm := metav1.ListMeta{ResourceVersion: strconv.FormatInt(page.Revision, 10)}
	if page.More && len(page.Entries) > 0 {
		last := page.Entries[len(page.Entries)-1].Key
		if lm.Continue, err = encodeContinue(last.Namespace, last.Name+"\x00", across, page.Revision); err != nil {
			return err
		}
		if page.Remaining > 0 {
			lm.RemainingItemCount = &page.Remaining
		}
	}
	return s.respondList(w, out, req, objs, lm)
}

// readWrite reads what every create and update needs: the response
// encoding, dry run, and the body as JSON.
func readWrite(r *http.Request) (out output, dryRun bool, body []byte, err error) {
	if out, err = negotiate(r); err != nil {
		return
	}
	if dryRun, err = isDryRun(r); err != nil {
		return
	}
	f, err := requestFormat(r, false)
	if err != nil {
		return
	}
	if body, err = readBody(r); err != nil {
		return
	}
	body, err = toJSON(body, f)
	return
}

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request, req request) error {
	if req.subresource != "" {
		return apierrors.NewMethodNotSupported(req.kind.GroupResource(), "create of a subresource")
	}
	out, dryRun, body, err := readWrite(r)
	if err != nil {
		return err
	}
	obj, written, warns, err := s.decodeBodyAs(r, req, body, nil)
	if err != nil {
		return err
	}
	m := accessor(obj)
	if req.kind.Namespaced {
		if m.Namespace != "" && m.Namespace != req.namespace {
			return apierrors.NewBadRequest(fmt.Sprintf("the namespace of the provided object (%s) does not match the namespace sent on the request (%s)", m.Namespace, req.namespace))
		}
		m.Namespace = req.namespace
	} else {
		m.Namespace = ""
	}
	manager, err := requestManager(r)
	if err != nil {
		return err
	}
	created, w2, err := s.create(r.Context(), req.kind, obj, userFrom(r.Context()), pathRewrite(req, written), dryRun, owner{manager: manager})
	if err != nil {
		return err
	}
	writeWarnings(w, append(warns, w2...))
	return s.respond(w, http.StatusCreated, out, req, created)
}

// createObject creates obj as the given user (no dry run, no rewrite).
func (s *Server) createObject(ctx context.Context, k *Kind, obj runtime.Object, user admission.User) (runtime.Object, error) {
	o, _, err := s.create(ctx, k, obj, user, nil, false, owner{manager: internalManager})
	return o, err
}

func (s *Server) checkNamespace(k *Kind, ns, name string) error {
	nsKind := s.kinds.Lookup("", "namespaces")
	obj, _, err := s.getStored(nsKind, "", ns)
	if err != nil {
		return err
	}
	n := obj.(*corev1.Namespace)
	if n.DeletionTimestamp != nil || n.Status.Phase == corev1.NamespaceTerminating {
		return apierrors.NewForbidden(k.GroupResource(), name,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	}
	return nil
}

func (s *Server) create(ctx context.Context, k *Kind, obj runtime.Object, user admission.User, rewrite func(string) string, dryRun bool, own owner) (runtime.Object, []string, error) {
	m := accessor(obj)
	if m.Name == "" && m.GenerateName == "" {
		return nil, nil, invalid(k.GroupKind(), "", field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name or generateName is required")})
	}
	if k.Namespaced {
		if err := s.checkNamespace(k, m.Namespace, m.Name); err != nil {
			return nil, nil, err
		}
	}
	m.UID = uuid.NewUUID()
	m.CreationTimestamp = metav1.NewTime(time.Now().Truncate(time.Second))
	m.ResourceVersion = ""
	m.DeletionTimestamp = nil
	m.DeletionGracePeriodSeconds = nil
	//lint:ignore SA1019 selfLink is never populated; clear what a client sent
	m.SelfLink = ""
	m.Generation = 0
	if k.HasGeneration {
		m.Generation = 1
	}
	if k.HasStatus {
		zeroField(obj, "Status")
	}
	if !own.applied {
		// managedFields a client sends on create are not kept: the
		// creator manages what it wrote.
		m.ManagedFields = nil
		obj = s.trackFields(k, "", k.New(), obj, own.manager)
		m = accessor(obj)
	}
	if err := s.checkRBACWrite(ctx, k, obj, nil, ""); err != nil {
		return nil, nil, err
	}
	generated := m.Name == ""
	if k.Namespaced {
		defer s.opts.Admitter.Serialize(ctx, m.Namespace)() // object count quotas
	}
	for attempt := 0; ; attempt++ {
		if generated {
			m.Name = m.GenerateName + rand.String(5)
		}
		warns, errs, err := s.opts.Admitter.Admit(ctx, admission.Request{Op: admission.Create, Object: obj, User: user, Path: rewrite, Resource: k.GroupResource()})
		if err != nil {
			return nil, nil, err
		}
		if len(errs) > 0 {
			return nil, nil, invalid(k.GroupKind(), m.Name, errs)
		}
		if dryRun {
			return obj, warns, nil
		}
		_, err = s.store.Create(s.key(k, m.Namespace, m.Name), func(rev int64) ([]byte, error) {
			m.ResourceVersion = strconv.FormatInt(rev, 10)
			return encodeStored(k, obj)
		})
		if errors.Is(err, store.ErrExists) {
			if generated && attempt < 5 {
				continue
			}
			return nil, nil, apierrors.NewAlreadyExists(k.GroupResource(), m.Name)
		}
		if err != nil {
			return nil, nil, err
		}
		if len(m.OwnerReferences) > 0 && s.ownersInFlux(m.Namespace, m.OwnerReferences) {
			// Its owner is gone already, or going (a foreground deletion
			// waits for it); an owner deleted after this look queues its
			// own pass, which sees this object stored.
			s.gc.Add(gcKey)
		}
		return obj, warns, nil
	}
}

func (s *Server) handleUpdate(w http.ResponseWriter, r *http.Request, req request) error {
	out, dryRun, body, err := readWrite(r)
	if err != nil {
		return err
	}
	manager, err := requestManager(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	for attempt := 0; ; attempt++ {
		cur, entry, err := s.getStored(req.kind, req.namespace, req.name)
		if err != nil {
			return err
		}
		obj, written, warns, err := s.decodeBodyAs(r, req, body, cur)
		if err != nil {
			return err
		}
		m := accessor(obj)
		if err := checkIdentity(req, m); err != nil {
			return err
		}
		expect := int64(0)
		if m.ResourceVersion != "" {
			expect, err = strconv.ParseInt(m.ResourceVersion, 10, 64)
			if err != nil || expect <= 0 {
				return invalid(req.kind.GroupKind(), req.name, field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), m.ResourceVersion, "must be a resourceVersion returned by the server")})
			}
			if expect != entry.Revision {
				return conflict(req.kind, req.name)
			}
		} else if req.kind.RequireResourceVersion {
			return invalid(req.kind.GroupKind(), req.name, field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), "", "must be specified for an update")})
		}
		updated, w2, err := s.update(ctx, req, obj, cur, entry, pathRewrite(req, written), dryRun, owner{manager: manager})
		if apierrors.IsConflict(err) && expect == 0 && attempt < 5 {
			continue
		}
		if err != nil {
			return err
		}
		writeWarnings(w, append(warns, w2...))
		return s.respond(w, http.StatusOK, out, req, updated)
	}
}

func checkIdentity(req request, m *metav1.ObjectMeta) error {
	if m.Name != "" && m.Name != req.name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.Name, req.name))
	}
	if req.kind.Namespaced && m.Namespace != "" && m.Namespace != req.namespace {
		return apierrors.NewBadRequest(fmt.Sprintf("the namespace of the object (%s) does not match the namespace on the URL (%s)", m.Namespace, req.namespace))
	}
	return nil
}

func conflict(k *Kind, name string) error {
	return apierrors.NewConflict(k.GroupResource(), name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

// update replaces the stored object cur (read at entry) with obj, keeping
// what the client may not change, and honouring the status subresource.
func (s *Server) update(ctx context.Context, req request, obj, cur runtime.Object, entry store.Entry, rewrite func(string) string, dryRun bool, own owner) (runtime.Object, []string, error) {
	k := req.kind
	om := accessor(cur)
	op := admission.Update
	if req.subresource == "status" {
		op = admission.UpdateStatus
		n := cur.DeepCopyObject()
		copyField(n, obj, "Status")
		if own.applied {
			accessor(n).ManagedFields = accessor(obj).ManagedFields
		}
		obj = n
	} else if k.HasStatus {
		copyField(obj, cur, "Status")
	}
	m := accessor(obj)
	m.Name, m.Namespace = om.Name, om.Namespace
	m.UID = om.UID
	m.CreationTimestamp = om.CreationTimestamp
	m.DeletionTimestamp = om.DeletionTimestamp
	m.DeletionGracePeriodSeconds = om.DeletionGracePeriodSeconds
	m.Generation = om.Generation
	//lint:ignore SA1019 selfLink is never populated; clear what a client sent
	m.SelfLink = ""
	m.ResourceVersion = om.ResourceVersion
	if !own.applied {
		obj = s.trackFields(k, req.subresource, cur, obj, own.manager)
		m = accessor(obj)
	}
	if om.DeletionTimestamp != nil {
		for _, f := range m.Finalizers {
			if !contains(om.Finalizers, f) {
				return nil, nil, invalid(k.GroupKind(), m.Name, field.ErrorList{field.Forbidden(field.NewPath("metadata", "finalizers"),
					fmt.Sprintf("no new finalizers can be added if the object is being deleted, found new finalizer %q", f))})
			}
		}
	}
	if err := s.checkRBACWrite(ctx, k, obj, cur, m.Name); err != nil {
		return nil, nil, err
	}
	warns, errs, err := s.opts.Admitter.Admit(ctx, admission.Request{Op: op, Object: obj, Old: cur, User: userFrom(ctx), Path: rewrite, Resource: k.GroupResource()})
	if err != nil {
		return nil, nil, err
	}
	if len(errs) > 0 {
		return nil, nil, invalid(k.GroupKind(), m.Name, errs)
	}
	if k.HasGeneration && op == admission.Update && !apiequality.Semantic.DeepEqual(fieldInterface(obj, "Spec"), fieldInterface(cur, "Spec")) {
		m.Generation = om.Generation + 1
	}
	nb, err := encodeIgnoringTimes(k, obj, cur, entry.Value)
	if err != nil {
		return nil, nil, err
	}
	if string(nb) == string(entry.Value) {
		return cur, warns, nil // nothing changed: no write, no new resourceVersion
	}
	if dryRun {
		return obj, warns, nil
	}
	key := s.key(k, m.Namespace, m.Name)
	if m.DeletionTimestamp != nil && len(m.Finalizers) == 0 {
		// The last finalizer is gone: the deletion completes.
		deleted, err := s.store.Mutate(key, func(c *store.Entry, rev int64) (store.Mutation, error) {
			if c == nil {
				return store.Mutation{}, store.ErrNotFound
			}
			if c.Revision != entry.Revision {
				return store.Mutation{}, store.ErrConflict
			}
			m.ResourceVersion = strconv.FormatInt(rev, 10)
			b, err := encodeStored(k, obj)
			return store.Mutation{Value: b, Delete: true}, err
		})
		if err != nil {
			return nil, nil, storeErr(k, m.Name, err)
		}
		_ = deleted
		s.gc.Add(gcKey)
		return obj, warns, nil
	}
	_, err = s.storeUpdate(key, entry.Revision, m.DeletionTimestamp != nil, func(rev int64) ([]byte, error) {
		m.ResourceVersion = strconv.FormatInt(rev, 10)
		return encodeStored(k, obj)
	})
	if err != nil {
		return nil, nil, storeErr(k, m.Name, err)
	}
	if gcRelevant(om, m) {
		s.gc.Add(gcKey)
	}
	return obj, warns, nil
}

// gcRelevant tells whether an update from old to cur changed what a
// garbage collector pass decides by: the owner references (an owner added
// may be gone, one removed may leave none), or the object is being
// deleted (its finalizers decide when it goes, and foreground deletions
// wait for it). Any other update, status updates and spec changes of
// dependents above all, leaves every decision of a pass as it was: a pass
// reads the whole store, and the controllers' status updates of
// Configurations, Revisions and Routes would otherwise queue them back to
// back while Services change. An owner deleted queues its own pass.
func gcRelevant(old, cur *metav1.ObjectMeta) bool {
	return cur.DeletionTimestamp != nil || !apiequality.Semantic.DeepEqual(old.OwnerReferences, cur.OwnerReferences)
}

func storeErr(k *Kind, name string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return apierrors.NewNotFound(k.GroupResource(), name)
	case errors.Is(err, store.ErrConflict):
		return conflict(k, name)
	case errors.Is(err, store.ErrExists):
		return apierrors.NewAlreadyExists(k.GroupResource(), name)
	}
	return err
}

func (s *Server) handlePatch(w http.ResponseWriter, r *http.Request, req request) error {
	out, err := negotiate(r)
	if err != nil {
		return err
	}
	dryRun, err := isDryRun(r)
	if err != nil {
		return err
	}
	format, err := requestFormat(r, true)
	if err != nil {
		return err
	}
	if format == formatApply {
		return s.handleApply(w, r, req, out, dryRun)
	}
	manager, err := requestManager(r)
	if err != nil {
		return err
	}
	if format == formatStrategicPatch && !builtinKind(req.kind) {
		// As a cluster answers for a custom resource.
		return newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			"the body of the request was in an unknown format - accepted media types include: "+strings.Join(patchTypes(req.kind), ", "))
	}
	patch, err := readBody(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	for attempt := 0; ; attempt++ {
		cur, entry, err := s.getStored(req.kind, req.namespace, req.name)
		if err != nil {
			return err
		}
		curV, err := toVersion(req.kind, req.version, cur.DeepCopyObject())
		if err != nil {
			return err
		}
		curJSON, err := json.Marshal(curV)
		if err != nil {
			return err
		}
		patched, err := s.applyPatch(format, curJSON, patch, req)
		if err != nil {
			return err
		}
		obj, written, warns, err := s.decodeBodyAs(r, req, patched, cur)
		if err != nil {
			return err
		}
		m := accessor(obj)
		if err := checkIdentity(req, m); err != nil {
			return err
		}
		pinned := m.ResourceVersion != "" && m.ResourceVersion != accessor(curV).ResourceVersion
		if pinned {
			return conflict(req.kind, req.name)
		}
		updated, w2, err := s.update(ctx, req, obj, cur, entry, pathRewrite(req, written), dryRun, owner{manager: manager})
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return err
		}
		writeWarnings(w, append(warns, w2...))
		return s.respond(w, http.StatusOK, out, req, updated)
	}
}

func (s *Server) applyPatch(format bodyFormat, cur, patch []byte, req request) ([]byte, error) {
	bad := func(err error) error {
		return apierrors.NewBadRequest(fmt.Sprintf("the patch could not be applied: %v", err))
	}
	switch format {
	case formatMergePatch:
		out, err := jsonpatch.MergePatch(cur, patch)
		if err != nil {
			return nil, bad(err)
		}
		return out, nil
	case formatJSONPatch:
		return s.applyJSONPatch(cur, patch)
	case formatStrategicPatch:
		var schemaObj runtime.Object
		if av := req.kind.Alt[req.version]; av != nil {
			schemaObj = av.New()
		} else {
			schemaObj = req.kind.New()
		}
		out, err := strategicpatch.StrategicMergePatch(cur, patch, schemaObj)
		if err != nil {
			return nil, bad(err)
		}
		return out, nil
	}
	return nil, errUnsupportedMediaType("")
}

// deleteOptions reads DeleteOptions from the body (if any) and the query.
func deleteOptions(r *http.Request) (metav1.DeleteOptions, error) {
	var opts metav1.DeleteOptions
	if r.Body != nil {
		b, err := readBody(r)
		if err != nil {
			return opts, err
		}
		if len(b) > 0 {
			if err := json.Unmarshal(b, &opts); err != nil {
				return opts, apierrors.NewBadRequest(fmt.Sprintf("the body is not valid DeleteOptions: %v", err))
			}
		}
	}
	q := r.URL.Query()
	if p := q.Get("propagationPolicy"); p != "" {
		pp := metav1.DeletionPropagation(p)
		opts.PropagationPolicy = &pp
	}
	if v, ok := q["dryRun"]; ok {
		opts.DryRun = v
	}
	if opts.PropagationPolicy != nil {
		switch *opts.PropagationPolicy {
		case metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan:
		default:
			return opts, invalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "DeleteOptions"}, "", field.ErrorList{field.NotSupported(field.NewPath("propagationPolicy"), *opts.PropagationPolicy,
				[]string{string(metav1.DeletePropagationForeground), string(metav1.DeletePropagationBackground), string(metav1.DeletePropagationOrphan)})})
		}
	}
	for _, v := range opts.DryRun {
		if v != "All" {
			return opts, apierrors.NewBadRequest(fmt.Sprintf("dryRun: unsupported value %q (supported: All)", v))
		}
	}
	return opts, nil
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request, req request) error {
	out, err := negotiate(r)
	if err != nil {
		return err
	}
	opts, err := deleteOptions(r)
	if err != nil {
		return err
	}
	obj, err := s.deleteObject(r.Context(), req.kind, req.namespace, req.name, opts)
	if err != nil {
		return err
	}
	return s.respond(w, http.StatusOK, out, req, obj)
}

func (s *Server) handleDeleteCollection(w http.ResponseWriter, r *http.Request, req request) error {
	out, err := negotiate(r)
	if err != nil {
		return err
	}
	sel, err := parseSelector(r, req.kind)
	if err != nil {
		return err
	}
	opts, err := deleteOptions(r)
	if err != nil {
		return err
	}
	// As a list does: the label index narrows to the objects whose labels
	// may match (a selector's =, == and in terms), the selector decides.
	var lo store.PageOptions
	if s.store.LabelIndexed() {
		lo.Labels = indexTerms(sel.labels)
	}
	page, err := s.store.ListPage(req.kind.storeResource(), req.namespace, lo)
	if err != nil {
		return err
	}
	entries, rev := page.Entries, page.Revision
	var deleted []runtime.Object
	for _, e := range entries {
		obj, err := decodeStored(req.kind, e.Value)
		if err != nil {
			return err
		}
		if !sel.matches(req.kind, obj) {
			continue
		}
		m := accessor(obj)
		d, err := s.deleteObject(r.Context(), req.kind, m.Namespace, m.Name, opts)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		deleted = append(deleted, d)
	}
	return s.respondList(w, out, req, deleted, metav1.ListMeta{ResourceVersion: strconv.FormatInt(rev, 10)})
}

// deleteObject deletes one object with Kubernetes' semantics: preconditions,
// finalizers, namespaces that terminate, and propagation to dependents.
func (s *Server) deleteObject(ctx context.Context, k *Kind, namespace, name string, opts metav1.DeleteOptions) (runtime.Object, error) {
	dryRun := len(opts.DryRun) > 0
	if k.Mirror && !dryRun {
		defer s.podChanged(namespace, name) // the mirror stops the instance
	}
	for attempt := 0; ; attempt++ {
		cur, entry, err := s.getStored(k, namespace, name)
		if err != nil {
			return nil, err
		}
		m := accessor(cur)
		if p := opts.Preconditions; p != nil {
			if p.UID != nil && *p.UID != m.UID {
				return nil, apierrors.NewConflict(k.GroupResource(), name, fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, m.UID))
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != m.ResourceVersion {
				return nil, apierrors.NewConflict(k.GroupResource(), name, fmt.Errorf("precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, m.ResourceVersion))
			}
		}
		policy := metav1.DeletePropagationBackground
		if opts.PropagationPolicy != nil {
			policy = *opts.PropagationPolicy
		}
		if ns, ok := cur.(*corev1.Namespace); ok {
			if name == metav1.NamespaceDefault {
				return nil, apierrors.NewForbidden(k.GroupResource(), name, errors.New("this namespace may not be deleted"))
			}
			if ns.DeletionTimestamp != nil || dryRun {
				return cur, nil
			}
			now := metav1.Now()
			ns.DeletionTimestamp = &now
			ns.Status.Phase = corev1.NamespaceTerminating
			obj, err := s.writeBack(k, cur, entry)
			if apierrors.IsConflict(err) && attempt < 5 {
				continue
			}
			s.gc.Add(gcKey)
			return obj, err
		}
		if dryRun {
			return cur, nil
		}
		if policy == metav1.DeletePropagationOrphan {
			if err := s.orphanDependents(ctx, m.UID); err != nil {
				return nil, err
			}
		}
		if len(m.Finalizers) > 0 || policy == metav1.DeletePropagationForeground {
			if m.DeletionTimestamp != nil && (policy != metav1.DeletePropagationForeground || contains(m.Finalizers, metav1.FinalizerDeleteDependents)) {
				return cur, nil // already being deleted
			}
			if m.DeletionTimestamp == nil {
				now := metav1.Now()
				zero := int64(0)
				m.DeletionTimestamp, m.DeletionGracePeriodSeconds = &now, &zero
			}
			if policy == metav1.DeletePropagationForeground && !contains(m.Finalizers, metav1.FinalizerDeleteDependents) {
				m.Finalizers = append(m.Finalizers, metav1.FinalizerDeleteDependents)
			}
			obj, err := s.writeBack(k, cur, entry)
			if apierrors.IsConflict(err) && attempt < 5 {
				continue
			}
			s.gc.Add(gcKey)
			return obj, err
		}
		_, err = s.store.Mutate(s.key(k, namespace, name), func(c *store.Entry, rev int64) (store.Mutation, error) {
			if c == nil {
				return store.Mutation{}, store.ErrNotFound
			}
			if c.Revision != entry.Revision {
				return store.Mutation{}, store.ErrConflict
			}
			m.ResourceVersion = strconv.FormatInt(rev, 10)
			b, err := encodeStored(k, cur)
			return store.Mutation{Value: b, Delete: true}, err
		})
		if errors.Is(err, store.ErrConflict) && attempt < 5 {
			continue
		}
		if err != nil {
			return nil, storeErr(k, name, err)
		}
		s.gc.Add(gcKey)
		return cur, nil
	}
}

// writeBack stores a changed copy of a stored object (system changes that
// skip admission: deletion marks, finalizers, owner references).
func (s *Server) writeBack(k *Kind, obj runtime.Object, entry store.Entry) (runtime.Object, error) {
	m := accessor(obj)
	_, err := s.storeUpdate(s.key(k, m.Namespace, m.Name), entry.Revision, true, func(rev int64) ([]byte, error) {
		m.ResourceVersion = strconv.FormatInt(rev, 10)
		return encodeStored(k, obj)
	})
	if err != nil {
		return nil, storeErr(k, m.Name, err)
	}
	return obj, nil
}

func (s *Server) runtimeClassExists(_ context.Context, name string) (bool, error) {
	k := s.kinds.Lookup("node.k8s.io", "runtimeclasses")
	if k == nil {
		return false, nil
	}
	_, err := s.store.Get(s.key(k, "", name))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
