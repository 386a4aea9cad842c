package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"
	"sigs.k8s.io/yaml"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
)

// Server-side apply and managedFields, with apimachinery's field manager
// over the type information of the OpenAPI definitions (openapi.go). Every
// write records its manager (?fieldManager, else the User-Agent's product,
// as kube-apiserver does); an apply merges the applied configuration with
// the live object by field ownership and answers 409 naming the managers
// it conflicts with, unless ?force=true.
//
// The field manager works in the storage version: managedFields name it
// whichever version a client wrote in, and apply is served in the storage
// version (the seed v1alpha1 API has no published schema).

// internalManager is the manager of writes knbox makes itself.
const internalManager = "knbox"

// fieldScheme knows the Go types of every stored kind, for the field
// manager's conversions between typed and unstructured objects.
var fieldScheme = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(servingv1.AddToScheme(s))
	utilruntime.Must(buildv1alpha1.AddToScheme(s))
	return s
})

// owner says who makes a write, for managedFields.
type owner struct {
	manager string
	// applied: the object comes out of an apply and carries its
	// managedFields already.
	applied bool
}

type fieldManagerKey struct {
	kind        *Kind
	subresource string
}

// fieldManagers caches one field manager per kind and subresource.
type fieldManagers struct {
	mu sync.Mutex
	m  map[fieldManagerKey]*managedfields.FieldManager
}

// fieldManager returns the field manager of k's resource or subresource.
func (s *Server) fieldManager(k *Kind, subresource string) (*managedfields.FieldManager, error) {
	s.fms.mu.Lock()
	defer s.fms.mu.Unlock()
	key := fieldManagerKey{k, subresource}
	if fm, ok := s.fms.m[key]; ok {
		return fm, nil
	}
	models, err := loadModels()
	if err != nil {
		return nil, err
	}
	gvk := k.GroupVersion().WithKind(k.Kind)
	if _, ok := models.byGVK[gvk]; !ok {
		return nil, fmt.Errorf("no schema for %s", gvk)
	}
	newFM := managedfields.NewDefaultFieldManager
	if !builtinKind(k) {
		newFM = managedfields.NewDefaultCRDFieldManager
	}
	sch := fieldScheme()
	fm, err := newFM(models.types, sch, sch, sch, gvk, k.GroupVersion(), subresource, resetFields(k, subresource))
	if err != nil {
		return nil, err
	}
	if s.fms.m == nil {
		s.fms.m = map[fieldManagerKey]*managedfields.FieldManager{}
	}
	s.fms.m[key] = fm
	return fm, nil
}

// resetFields are the fields a write to a (sub)resource cannot change, so
// that its manager does not own them: status on the main resource, the rest
// on the status subresource (as kube-apiserver's strategies say).
func resetFields(k *Kind, subresource string) map[fieldpath.APIVersion]*fieldpath.Set {
	if !k.HasStatus {
		return nil
	}
	set := fieldpath.NewSet(fieldpath.MakePathOrDie("status"))
	if subresource == "status" {
		set = fieldpath.NewSet(fieldpath.MakePathOrDie("metadata"), fieldpath.MakePathOrDie("spec"))
	}
	return map[fieldpath.APIVersion]*fieldpath.Set{fieldpath.APIVersion(k.GroupVersion().String()): set}
}

func setKind(k *Kind, obj runtime.Object) {
	obj.GetObjectKind().SetGroupVersionKind(k.GroupVersion().WithKind(k.Kind))
}

// trackFields records in obj's managedFields what manager changed from
// live (an empty object on create). A failure leaves obj without
// managedFields, as kube-apiserver does, and is logged.
func (s *Server) trackFields(k *Kind, subresource string, live, obj runtime.Object, manager string) runtime.Object {
	if k.Virtual {
		return obj
	}
	fm, err := s.fieldManager(k, subresource)
	if err != nil {
		s.log.Warn("managed fields not tracked", "kind", k.Kind, "err", err)
		return obj
	}
	live = live.DeepCopyObject()
	setKind(k, live)
	setKind(k, obj)
	return fm.UpdateNoErrors(live, obj, manager)
}

// requestManager is the field manager of a write: ?fieldManager, else the
// product of the User-Agent (kube-apiserver's rule).
func requestManager(r *http.Request) (string, error) {
	m := r.URL.Query().Get("fieldManager")
	if errs := metav1validation.ValidateFieldManager(m, field.NewPath("fieldManager")); len(errs) > 0 {
		return "", apierrors.NewBadRequest(errs.ToAggregate().Error())
	}
	if m != "" {
		return m, nil
	}
	ua, _, _ := strings.Cut(r.UserAgent(), "/")
	var b strings.Builder
	for _, c := range ua {
		if !unicode.IsPrint(c) {
			continue
		}
		if b.Len()+utf8.RuneLen(c) > metav1validation.FieldManagerMaxLength {
			break
		}
		b.WriteRune(c)
	}
	return b.String(), nil
}

// sameButTimes reports whether two managedFields lists differ at most in
// their entries' times.
func sameButTimes(a, b []metav1.ManagedFieldsEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.Time, y.Time = nil, nil
		if !apiequality.Semantic.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// encodeIgnoringTimes encodes obj for the store. When its managedFields
// differ from cur's only in times and, with cur's times, obj encodes as
// stored, it keeps cur's times, so that a write that changes nothing else
// (an apply repeated) stores nothing and keeps the resourceVersion (what
// kube-apiserver's IgnoreManagedFieldsTimestampsTransformer does).
func encodeIgnoringTimes(k *Kind, obj, cur runtime.Object, stored []byte) ([]byte, error) {
	nb, err := encodeStored(k, obj)
	if err != nil || bytes.Equal(nb, stored) {
		return nb, err
	}
	m, om := accessor(obj), accessor(cur)
	if len(m.ManagedFields) == 0 || !sameButTimes(m.ManagedFields, om.ManagedFields) {
		return nb, nil
	}
	mine := m.ManagedFields
	m.ManagedFields = make([]metav1.ManagedFieldsEntry, len(mine))
	for i := range mine {
		m.ManagedFields[i] = mine[i]
		m.ManagedFields[i].Time = om.ManagedFields[i].Time
	}
	if old, err := encodeStored(k, obj); err == nil && bytes.Equal(old, stored) {
		return old, nil
	}
	m.ManagedFields = mine
	return nb, nil
}

// applyPatch decodes the body of an apply request: YAML or JSON, one
// object of the request's kind and version. Unknown fields are refused
// under fieldValidation=Strict and reported as warnings otherwise.
func decodeApplyPatch(k *Kind, version string, body []byte, fv fieldValidation) (*unstructured.Unstructured, []string, error) {
	j, err := yaml.YAMLToJSONStrict(body)
	if err != nil {
		if fv == validationStrict {
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("the apply configuration is not valid YAML: %v", err))
		}
		if j, err = yaml.YAMLToJSON(body); err != nil {
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("the apply configuration is not valid YAML: %v", err))
		}
	}
	j = bytes.TrimSpace(j)
	if len(j) == 0 || j[0] != '{' {
		return nil, nil, apierrors.NewBadRequest("the apply configuration must be one object")
	}
	var obj map[string]interface{}
	if err := json.Unmarshal(j, &obj); err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("the apply configuration is not valid: %v", err))
	}
	u := &unstructured.Unstructured{Object: obj}
	want := schema.GroupVersion{Group: k.Group, Version: version}.String()
	if u.GetAPIVersion() != want {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("apiVersion: the apply configuration must name %q, not %q", want, u.GetAPIVersion()))
	}
	if u.GetKind() != k.Kind {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("kind: the apply configuration must name %q, not %q", k.Kind, u.GetKind()))
	}
	if _, ok := obj["metadata"]; ok {
		if _, ok := obj["metadata"].(map[string]interface{}); !ok {
			return nil, nil, apierrors.NewBadRequest("metadata: must be an object")
		}
	}
	unknown, err := decodeStrict(j, k.New())
	if err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", k.Kind, version, k.Kind, err))
	}
	var warns []string
	if len(unknown) > 0 {
		switch fv {
		case validationStrict:
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: strict decoding error: %s", k.Kind, version, k.Kind, joinMsgs(unknown)))
		case validationWarn:
			warns = unknown
		}
	}
	return u, warns, nil
}

// handleApply serves a PATCH with an apply configuration
// (application/apply-patch+yaml): it creates the object when there is none.
func (s *Server) handleApply(w http.ResponseWriter, r *http.Request, req request, out output, dryRun bool) error {
	k := req.kind
	q := r.URL.Query()
	manager := q.Get("fieldManager")
	if manager == "" {
		return apierrors.NewBadRequest("fieldManager: required for apply requests")
	}
	if _, err := requestManager(r); err != nil {
		return err
	}
	force := false
	if v := q.Get("force"); v != "" {
		var err error
		if force, err = strconv.ParseBool(v); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("force: invalid value %q: must be true or false", v))
		}
	}
	if req.version != k.Version {
		return newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("server-side apply of %s is served in version %s; apply with apiVersion: %s, or use client-side apply",
				k.Resource, k.Version, k.GroupVersion()))
	}
	if req.subresource != "" && req.subresource != "status" {
		return apierrors.NewMethodNotSupported(k.GroupResource(), "apply to "+req.subresource)
	}
	fv, err := parseFieldValidation(r)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	patch, warns, err := decodeApplyPatch(k, req.version, body, fv)
	if err != nil {
		return err
	}
	fm, err := s.fieldManager(k, req.subresource)
	if err != nil {
		return err
	}
	ctx := r.Context()
	for attempt := 0; ; attempt++ {
		cur, entry, err := s.getStored(k, req.namespace, req.name)
		creating := apierrors.IsNotFound(err)
		if err != nil && (!creating || req.subresource != "") {
			return err
		}
		live := cur
		if creating {
			live = k.New()
			lm := accessor(live)
			lm.Name, lm.Namespace = req.name, req.namespace
		} else {
			live = cur.DeepCopyObject()
		}
		setKind(k, live)
		obj, err := fm.Apply(live, patch.DeepCopy(), manager, force)
		if err != nil {
			if _, ok := err.(apierrors.APIStatus); ok {
				return err
			}
			return apierrors.NewBadRequest(fmt.Sprintf("the apply configuration cannot be applied: %v", err))
		}
		m := accessor(obj)
		if err := checkIdentity(req, m); err != nil {
			return err
		}
		own := owner{manager: manager, applied: true}
		if creating {
			if k.Namespaced {
				m.Namespace = req.namespace
			}
			m.Name = req.name
			created, w2, err := s.create(ctx, k, obj, userFrom(ctx), nil, dryRun, own)
			if apierrors.IsAlreadyExists(err) && attempt < 5 {
				continue // created meanwhile: apply to it
			}
			if err != nil {
				return err
			}
			writeWarnings(w, append(warns, w2...))
			return s.respond(w, http.StatusCreated, out, req, created)
		}
		if rv := patch.GetResourceVersion(); rv != "" && rv != accessor(cur).ResourceVersion {
			return conflict(k, req.name)
		}
		updated, w2, err := s.update(ctx, req, obj, cur, entry, nil, dryRun, own)
		if apierrors.IsConflict(err) && attempt < 5 { // a lost race on the resourceVersion
			continue
		}
		if err != nil {
			return err
		}
		writeWarnings(w, append(warns, w2...))
		return s.respond(w, http.StatusOK, out, req, updated)
	}
}
