package apiserver

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingv1beta1 "knative.dev/serving/pkg/apis/serving/v1beta1"
	"time"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
)

// Kind describes one resource the server serves: its names on the wire,
// its storage type, the versions it is served in and how it behaves.
type Kind struct {
	Group      string
	Version    string // storage version
	Kind       string
	Resource   string // plural
	Singular   string
	ShortNames []string
	Categories []string
	Namespaced bool

	// HasStatus: the object has a /status subresource; status changes only
	// there, spec changes never there.
	HasStatus bool
	// HasGeneration: metadata.generation is kept and bumped on spec changes.
	HasGeneration bool
	// RequireResourceVersion: an update must name the resourceVersion it
	// replaces (Kubernetes requires this of custom resources, which the
	// Knative kinds are on a cluster).
	RequireResourceVersion bool
	// Virtual kinds are only created and never stored (the access
	// reviews); their handlers are in reviews.go.
	Virtual bool
	// Mirror kinds show what the runtime side runs (Pods): only the
	// server writes them (RunPods); users may read and delete them.
	Mirror bool
	// ReadOnly kinds describe knbox itself (its ingress Service): only
	// the server writes them; users may only read them.
	ReadOnly bool

	New     func() runtime.Object
	NewList func() runtime.Object

	// Alt holds served versions other than the storage version.
	Alt map[string]*AltVersion

	// Columns and Row give the server-side table (kubectl get).
	Columns []metav1.TableColumnDefinition
	Row     func(obj runtime.Object) []interface{}

	// FieldLabels lists field selector labels beyond metadata.name and
	// metadata.namespace, with how to read them.
	FieldLabels map[string]func(obj runtime.Object) string

	// StoreAs, when set, keeps the kind's objects as another kind's, as
	// a cluster keeps events.k8s.io Events as core Events: one set of
	// objects served in both shapes.
	StoreAs *StoreAs
}

// StoreAs is the kind a Kind's objects are stored as, and the conversions.
type StoreAs struct {
	Kind *Kind
	// To converts an object of the Kind to the stored kind; From back.
	To   func(runtime.Object) (runtime.Object, error)
	From func(runtime.Object) (runtime.Object, error)
}

// AltVersion is a served version that is converted to and from storage.
type AltVersion struct {
	New     func() runtime.Object
	NewList func() runtime.Object
	// ToStorage converts an object of this version to the storage version.
	// base is the stored object on update (nil on create).
	ToStorage func(obj, base runtime.Object) (runtime.Object, error)
	// FromStorage converts a stored object to this version.
	FromStorage func(obj runtime.Object) (runtime.Object, error)
	// Validate checks what only this version can express (its shape); the
	// storage version's validation runs after conversion.
	Validate func(obj runtime.Object) error
	// FieldPath rewrites a storage-version field path into this version's
	// terms, so errors name the fields the client sent.
	FieldPath func(obj runtime.Object, path string) string
}

// GroupVersion is the storage group version.
func (k *Kind) GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: k.Group, Version: k.Version}
}

// GroupResource names the resource as errors do ("services.serving.knative.dev").
func (k *Kind) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: k.Group, Resource: k.Resource}
}

// GroupKind names the kind as errors do.
func (k *Kind) GroupKind() schema.GroupKind {
	return schema.GroupKind{Group: k.Group, Kind: k.Kind}
}

// Versions lists the served versions, preferred (storage) first.
func (k *Kind) Versions() []string {
	vs := []string{k.Version}
	for v := range k.Alt {
		vs = append(vs, v)
	}
	return vs
}

// Serves reports whether version is served.
func (k *Kind) Serves(version string) bool {
	if version == k.Version {
		return true
	}
	_, ok := k.Alt[version]
	return ok
}

// storeResource is the store's name for the resource.
func (k *Kind) storeResource() string {
	if k.StoreAs != nil {
		return k.StoreAs.Kind.storeResource()
	}
	return k.GroupResource().String()
}

// Kinds is the set of served kinds.
type Kinds struct {
	all []*Kind
}

// Lookup finds a kind by group and plural resource name.
func (ks *Kinds) Lookup(group, resource string) *Kind {
	for _, k := range ks.all {
		if k.Group == group && k.Resource == resource {
			return k
		}
	}
	return nil
}

// ByKind finds a kind by group and kind name.
func (ks *Kinds) ByKind(group, kind string) *Kind {
	for _, k := range ks.all {
		if k.Group == group && k.Kind == kind {
			return k
		}
	}
	return nil
}

// All returns every served kind.
func (ks *Kinds) All() []*Kind { return ks.all }

// groups returns group -> versions (preferred first) in a stable order.
func (ks *Kinds) groups() (names []string, versions map[string][]string) {
	versions = map[string][]string{}
	for _, k := range ks.all {
		if _, ok := versions[k.Group]; !ok {
			names = append(names, k.Group)
		}
		for _, v := range k.Versions() {
			if !contains(versions[k.Group], v) {
				versions[k.Group] = append(versions[k.Group], v)
			}
		}
	}
	return names, versions
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

var knativeCategories = []string{"all", "knative", "serving"}

// DefaultKinds returns the kinds knbox serves. alt adds served versions
// (the seed v1alpha1 API) to the Knative kinds, keyed by kind name.
func DefaultKinds(alt map[string]map[string]*AltVersion) *Kinds {
	ks := &Kinds{all: []*Kind{
		{
			Group: "", Version: "v1", Kind: "Namespace", Resource: "namespaces", Singular: "namespace",
			ShortNames: []string{"ns"}, HasStatus: true,
			New: func() runtime.Object { return &corev1.Namespace{} }, NewList: func() runtime.Object { return &corev1.NamespaceList{} },
			Columns: cols(col("Status", "string", "The phase of the namespace")),
			Row: func(o runtime.Object) []interface{} {
				return []interface{}{string(o.(*corev1.Namespace).Status.Phase)}
			},
			FieldLabels: map[string]func(runtime.Object) string{
				"status.phase": func(o runtime.Object) string { return string(o.(*corev1.Namespace).Status.Phase) },
			},
		},
		{
			Group: "", Version: "v1", Kind: "Secret", Resource: "secrets", Singular: "secret", Namespaced: true,
			New: func() runtime.Object { return &corev1.Secret{} }, NewList: func() runtime.Object { return &corev1.SecretList{} },
			Columns: cols(col("Type", "string", "The type of the secret"), col("Data", "string", "The number of entries in the data")),
			Row: func(o runtime.Object) []interface{} {
				s := o.(*corev1.Secret)
				return []interface{}{string(s.Type), int64(len(s.Data))}
			},
			FieldLabels: map[string]func(runtime.Object) string{
				"type": func(o runtime.Object) string { return string(o.(*corev1.Secret).Type) },
			},
		},
		{
			Group: "", Version: "v1", Kind: "ConfigMap", Resource: "configmaps", Singular: "configmap", Namespaced: true,
			ShortNames: []string{"cm"},
			New:        func() runtime.Object { return &corev1.ConfigMap{} }, NewList: func() runtime.Object { return &corev1.ConfigMapList{} },
			Columns: cols(col("Data", "string", "The number of entries in data and binaryData")),
			Row: func(o runtime.Object) []interface{} {
				c := o.(*corev1.ConfigMap)
				return []interface{}{int64(len(c.Data) + len(c.BinaryData))}
			},
		},
		{
			Group: "node.k8s.io", Version: "v1", Kind: "RuntimeClass", Resource: "runtimeclasses", Singular: "runtimeclass",
			New: func() runtime.Object { return &nodev1.RuntimeClass{} }, NewList: func() runtime.Object { return &nodev1.RuntimeClassList{} },
			Columns: cols(col("Handler", "string", "The OCI runtime handler")),
			Row: func(o runtime.Object) []interface{} {
				return []interface{}{o.(*nodev1.RuntimeClass).Handler}
			},
		},
		{
			Group: "serving.knative.dev", Version: "v1", Kind: "Service", Resource: "services", Singular: "service",
			ShortNames: []string{"kservice", "ksvc"}, Categories: knativeCategories, Namespaced: true,
			HasStatus: true, HasGeneration: true, RequireResourceVersion: true,
			New: func() runtime.Object { return &servingv1.Service{} }, NewList: func() runtime.Object { return &servingv1.ServiceList{} },
			Columns: cols(col("URL", "string", ""), col("LatestCreated", "string", ""), col("LatestReady", "string", ""),
				col("Ready", "string", ""), col("Reason", "string", "")),
			Row: func(o runtime.Object) []interface{} {
				s := o.(*servingv1.Service)
				ready, reason := readyCond(s.Status.Conditions)
				return []interface{}{urlString(s.Status.URL), s.Status.LatestCreatedRevisionName, s.Status.LatestReadyRevisionName, ready, reason}
			},
		},
		{
			Group: "serving.knative.dev", Version: "v1", Kind: "Configuration", Resource: "configurations", Singular: "configuration",
			ShortNames: []string{"config", "cfg"}, Categories: knativeCategories, Namespaced: true,
			HasStatus: true, HasGeneration: true, RequireResourceVersion: true,
			New: func() runtime.Object { return &servingv1.Configuration{} }, NewList: func() runtime.Object { return &servingv1.ConfigurationList{} },
			Columns: cols(col("LatestCreated", "string", ""), col("LatestReady", "string", ""), col("Ready", "string", ""), col("Reason", "string", "")),
			Row: func(o runtime.Object) []interface{} {
				c := o.(*servingv1.Configuration)
				ready, reason := readyCond(c.Status.Conditions)
				return []interface{}{c.Status.LatestCreatedRevisionName, c.Status.LatestReadyRevisionName, ready, reason}
			},
		},
		{
			Group: "serving.knative.dev", Version: "v1", Kind: "Revision", Resource: "revisions", Singular: "revision",
			ShortNames: []string{"rev"}, Categories: knativeCategories, Namespaced: true,
			HasStatus: true, HasGeneration: true, RequireResourceVersion: true,
			New: func() runtime.Object { return &servingv1.Revision{} }, NewList: func() runtime.Object { return &servingv1.RevisionList{} },
			Columns: cols(col("Config Name", "string", ""), col("Generation", "string", ""), col("Ready", "string", ""),
				col("Reason", "string", ""), col("Actual Replicas", "integer", ""), col("Desired Replicas", "integer", "")),
			Row: func(o runtime.Object) []interface{} {
				r := o.(*servingv1.Revision)
				ready, reason := readyCond(r.Status.Conditions)
				return []interface{}{r.Labels["serving.knative.dev/configuration"], r.Labels["serving.knative.dev/configurationGeneration"],
					ready, reason, optInt(r.Status.ActualReplicas), optInt(r.Status.DesiredReplicas)}
			},
		},
		{
			Group: "serving.knative.dev", Version: "v1", Kind: "Route", Resource: "routes", Singular: "route",
			ShortNames: []string{"rt"}, Categories: knativeCategories, Namespaced: true,
			HasStatus: true, HasGeneration: true, RequireResourceVersion: true,
			New: func() runtime.Object { return &servingv1.Route{} }, NewList: func() runtime.Object { return &servingv1.RouteList{} },
			Columns: cols(col("URL", "string", ""), col("Ready", "string", ""), col("Reason", "string", "")),
			Row: func(o runtime.Object) []interface{} {
				r := o.(*servingv1.Route)
				ready, reason := readyCond(r.Status.Conditions)
				return []interface{}{urlString(r.Status.URL), ready, reason}
			},
		},
		{
			Group: "serving.knative.dev", Version: "v1beta1", Kind: "DomainMapping", Resource: "domainmappings", Singular: "domainmapping",
			ShortNames: []string{"dm"}, Categories: knativeCategories, Namespaced: true,
			HasStatus: true, HasGeneration: true, RequireResourceVersion: true,
			New: func() runtime.Object { return &servingv1beta1.DomainMapping{} }, NewList: func() runtime.Object { return &servingv1beta1.DomainMappingList{} },
			Columns: cols(col("URL", "string", ""), col("Ready", "string", ""), col("Reason", "string", "")),
			Row: func(o runtime.Object) []interface{} {
				d := o.(*servingv1beta1.DomainMapping)
				ready, reason := readyCond(d.Status.Conditions)
				return []interface{}{urlString(d.Status.URL), ready, reason}
			},
		},
		{
			Group: "networking.internal.knative.dev", Version: "v1alpha1", Kind: "ClusterDomainClaim", Resource: "clusterdomainclaims", Singular: "clusterdomainclaim",
			ShortNames: []string{"cdc"}, RequireResourceVersion: true,
			New: func() runtime.Object { return &netv1alpha1.ClusterDomainClaim{} }, NewList: func() runtime.Object { return &netv1alpha1.ClusterDomainClaimList{} },
			Columns: cols(col("Namespace", "string", "The namespace that may map the domain")),
			Row: func(o runtime.Object) []interface{} {
				return []interface{}{o.(*netv1alpha1.ClusterDomainClaim).Spec.Namespace}
			},
		},
	}}
	ks.all = append(ks.all, buildKind())
	ks.all = append(ks.all, podsKind(), ingressKind())
	ks.all = append(ks.all, authKinds()...)
	ks.all = append(ks.all, tenantKinds()...)
	ks.all = append(ks.all, eventKinds()...)
	for _, k := range ks.all {
		if a, ok := alt[k.Kind]; ok && k.Group == "serving.knative.dev" {
			k.Alt = a
		}
	}
	return ks
}

// buildKind is build.knative.dev/v1alpha1 Build, the seed era's build
// (package apis/build/v1alpha1); package build runs it.
func buildKind() *Kind {
	return &Kind{
		Group: buildv1alpha1.GroupName, Version: "v1alpha1", Kind: "Build", Resource: "builds", Singular: "build",
		Categories: []string{"all", "knative"}, Namespaced: true,
		HasStatus: true, HasGeneration: true, RequireResourceVersion: true,
		New: func() runtime.Object { return &buildv1alpha1.Build{} }, NewList: func() runtime.Object { return &buildv1alpha1.BuildList{} },
		Columns: cols(col("Succeeded", "string", ""), col("Reason", "string", ""), col("StartTime", "string", ""), col("CompletionTime", "string", "")),
		Row: func(o runtime.Object) []interface{} {
			b := o.(*buildv1alpha1.Build)
			status, reason := "", ""
			if c := b.Status.Succeeded(); c != nil {
				status, reason = string(c.Status), c.Reason
			}
			t := func(t *metav1.Time) string {
				if t == nil {
					return ""
				}
				return t.UTC().Format(time.RFC3339)
			}
			return []interface{}{status, reason, t(b.Status.StartTime), t(b.Status.CompletionTime)}
		},
	}
}

// copyField sets dst.name = src.name (both the same struct type).
func copyField(dst, src runtime.Object, name string) {
	d := reflect.ValueOf(dst).Elem().FieldByName(name)
	s := reflect.ValueOf(src).Elem().FieldByName(name)
	if d.IsValid() && s.IsValid() && d.CanSet() {
		d.Set(s)
	}
}

// zeroField resets obj.name to its zero value.
func zeroField(obj runtime.Object, name string) {
	f := reflect.ValueOf(obj).Elem().FieldByName(name)
	if f.IsValid() && f.CanSet() {
		f.Set(reflect.Zero(f.Type()))
	}
}

// fieldInterface returns obj.name as an interface (nil when absent).
func fieldInterface(obj runtime.Object, name string) interface{} {
	f := reflect.ValueOf(obj).Elem().FieldByName(name)
	if !f.IsValid() {
		return nil
	}
	return f.Interface()
}
