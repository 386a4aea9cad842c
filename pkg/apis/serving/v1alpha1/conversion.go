package v1alpha1

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	"knative.dev/pkg/ptr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// Annotations that carry, on the v1 objects, what v1 cannot say itself.
// The v1alpha1- ones are removed again by the FromV1 functions, so a
// v1alpha1 client never sees them; whatever a v1alpha1 client writes in them
// is ignored (the ToV1 functions set them from the spec).
const (
	// ModeAnnotation on a v1 Service records the v1alpha1 mode it was
	// written in. "manual" tells the Service controller to leave the Route
	// and the Configuration alone.
	ModeAnnotation = "serving.knbox.dev/v1alpha1-mode"
	// ConcurrencyModelAnnotation on a v1 Revision (or template) records
	// the v1alpha1 concurrencyModel.
	ConcurrencyModelAnnotation = "serving.knbox.dev/v1alpha1-concurrency-model"
	// ServingStateAnnotation on a v1 Revision (or template) records the
	// v1alpha1 servingState.
	ServingStateAnnotation = "serving.knbox.dev/v1alpha1-serving-state"
	// V1TrafficAnnotation on a v1alpha1 Service in manual mode holds, as
	// JSON, the v1 spec.traffic that the seed API cannot express.
	V1TrafficAnnotation = "serving.knbox.dev/v1-traffic"
)

// The values of ModeAnnotation.
const (
	ModeRunLatest = "runLatest"
	ModePinned    = "pinned"
	ModeRelease   = "release"
	ModeManual    = "manual"
)

// The tags of the v1 traffic targets of a release.
const (
	TagCurrent   = "current"
	TagCandidate = "candidate"
	TagLatest    = "latest"
)

// ServiceToV1 converts a v1alpha1 Service to the storage version. base is
// the currently stored v1 object (nil on create); it is needed for manual.
func ServiceToV1(in *Service, base *servingv1.Service) (*servingv1.Service, error) {
	if err := in.Validate(context.Background()); err != nil {
		return nil, err
	}
	out := &servingv1.Service{
		TypeMeta:   v1TypeMeta("Service"),
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Status:     serviceStatusToV1(&in.Status),
	}
	var v1Traffic string
	out.Annotations, v1Traffic = takeAnnotation(out.Annotations, V1TrafficAnnotation)
	out.Annotations, _ = takeAnnotation(out.Annotations, ModeAnnotation)

	mode := ModeManual
	switch s := in.Spec; {
	case s.RunLatest != nil:
		mode = ModeRunLatest
		out.Spec.ConfigurationSpec = configurationSpecToV1(&s.RunLatest.Configuration)
		out.Spec.Traffic = []servingv1.TrafficTarget{latestTarget("", 100)}
	case s.Pinned != nil:
		mode = ModePinned
		out.Spec.ConfigurationSpec = configurationSpecToV1(&s.Pinned.Configuration)
		out.Spec.Traffic = []servingv1.TrafficTarget{revisionTarget("", s.Pinned.RevisionName, 100)}
	case s.Release != nil:
		mode = ModeRelease
		out.Spec.ConfigurationSpec = configurationSpecToV1(&s.Release.Configuration)
		out.Spec.Traffic = releaseTraffic(s.Release)
	default: // Manual; Validate made sure exactly one mode is set.
		if base == nil {
			return nil, &apis.FieldError{
				Message: "a Service can only be switched to manual after it exists",
				Paths:   []string{"spec.manual"},
			}
		}
		out.Spec = *base.Spec.DeepCopy()
		if v1Traffic != "" {
			// The traffic a v1 client wrote, handed back unchanged: the
			// Service is as it was, in v1 terms, with no mode.
			traffic, err := parseV1Traffic(v1Traffic)
			if err != nil {
				return nil, err
			}
			out.Spec.Traffic = traffic
			return out, nil
		}
	}
	out.Annotations = setAnnotation(out.Annotations, ModeAnnotation, mode)
	return out, nil
}

// ServiceFromV1 converts a stored v1 Service to v1alpha1. A Service whose
// spec the seed API cannot express is shown as manual, with its v1 traffic
// in V1TrafficAnnotation (see the package documentation).
func ServiceFromV1(in *servingv1.Service) (*Service, error) {
	out := &Service{
		TypeMeta:   v1alpha1TypeMeta("Service"),
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Status:     serviceStatusFromV1(&in.Status),
	}
	var mode string
	out.Annotations, mode = takeAnnotation(out.Annotations, ModeAnnotation)
	out.Annotations, _ = takeAnnotation(out.Annotations, V1TrafficAnnotation)
	if mode == ModeManual {
		out.Spec.Manual = &ManualMode{}
		return out, nil
	}
	if spec, ok := serviceSpecFromV1(in); ok {
		out.Spec = spec
		return out, nil
	}
	raw, err := json.Marshal(in.Spec.Traffic)
	if err != nil {
		return nil, fmt.Errorf("spec.traffic: %w", err)
	}
	back, ferr := parseV1Traffic(string(raw))
	if ferr != nil || !equality.Semantic.DeepEqual(back, in.Spec.Traffic) {
		return nil, fmt.Errorf("spec.traffic: cannot be represented in %s", SchemeGroupVersion)
	}
	out.Spec.Manual = &ManualMode{}
	out.Annotations = setAnnotation(out.Annotations, V1TrafficAnnotation, string(raw))
	return out, nil
}

// serviceSpecFromV1 infers the mode of a v1 Service from its traffic and
// reports whether the result converts back to the same v1 spec.
func serviceSpecFromV1(in *servingv1.Service) (ServiceSpec, bool) {
	var spec ServiceSpec
	cs, err := configurationSpecFromV1(&in.Spec.ConfigurationSpec)
	if err != nil {
		return spec, false
	}
	traffic := defaultedServiceTraffic(in.Spec.Traffic)
	for _, t := range traffic {
		if t.ConfigurationName != "" || t.URL != nil {
			return spec, false
		}
	}
	switch {
	case len(traffic) == 1 && traffic[0].Tag == "" && *traffic[0].Percent == 100:
		switch name, ok := targetName(traffic[0]); {
		case !ok:
			return spec, false
		case name == LatestRevisionName:
			spec.RunLatest = &RunLatestMode{Configuration: cs}
		default:
			spec.Pinned = &PinnedMode{RevisionName: traffic[0].RevisionName, Configuration: cs}
		}
	case len(traffic) == 2 || len(traffic) == 3:
		rel, ok := releaseFromTraffic(traffic)
		if !ok {
			return spec, false
		}
		rel.Configuration = cs
		spec.Release = rel
	default:
		return spec, false
	}

	// Belt and braces: the inferred spec must be valid and convert back to
	// the same v1 spec, up to Knative's own defaulting of the traffic.
	// Anything else is shown as manual.
	probe := &Service{Spec: spec}
	got, err := ServiceToV1(probe, in)
	if err != nil {
		return spec, false
	}
	want := canonicalV1ServiceSpec(&in.Spec)
	have := canonicalV1ServiceSpec(&got.Spec)
	return spec, equality.Semantic.DeepEqual(want, have)
}

// releaseFromTraffic recognizes the traffic that releaseTraffic makes:
// current [+ candidate] + latest, with percentages 100-p and p.
func releaseFromTraffic(traffic []servingv1.TrafficTarget) (*ReleaseMode, bool) {
	n := len(traffic)
	last := traffic[n-1]
	if last.Tag != TagLatest || !*last.LatestRevision || last.RevisionName != "" || *last.Percent != 0 {
		return nil, false
	}
	tags := []string{TagCurrent, TagCandidate}
	rel := &ReleaseMode{}
	var sum int64
	for i, t := range traffic[:n-1] {
		name, ok := targetName(t)
		if !ok || t.Tag != tags[i] {
			return nil, false
		}
		rel.Revisions = append(rel.Revisions, name)
		sum += *t.Percent
	}
	if sum != 100 {
		return nil, false
	}
	if n == 3 {
		p := *traffic[1].Percent
		if p < 0 || p > 99 {
			return nil, false
		}
		rel.RolloutPercent = int(p)
	}
	return rel, true
}

// targetName returns the v1alpha1 revision name of a defaulted v1 traffic
// target: its revisionName, or LatestRevisionName if it follows the latest
// Revision. ok is false for targets that are neither.
func targetName(t servingv1.TrafficTarget) (name string, ok bool) {
	switch {
	case *t.LatestRevision && t.RevisionName == "":
		return LatestRevisionName, true
	case !*t.LatestRevision && t.RevisionName != "" && t.RevisionName != LatestRevisionName:
		return t.RevisionName, true
	}
	return "", false
}

func releaseTraffic(r *ReleaseMode) []servingv1.TrafficTarget {
	p := int64(r.RolloutPercent)
	target := func(tag, name string, percent int64) servingv1.TrafficTarget {
		if name == LatestRevisionName {
			return latestTarget(tag, percent)
		}
		return revisionTarget(tag, name, percent)
	}
	traffic := []servingv1.TrafficTarget{target(TagCurrent, r.Revisions[0], 100-p)}
	if len(r.Revisions) == 2 {
		traffic = append(traffic, target(TagCandidate, r.Revisions[1], p))
	}
	return append(traffic, latestTarget(TagLatest, 0))
}

func latestTarget(tag string, percent int64) servingv1.TrafficTarget {
	return servingv1.TrafficTarget{Tag: tag, LatestRevision: ptr.Bool(true), Percent: ptr.Int64(percent)}
}

func revisionTarget(tag, name string, percent int64) servingv1.TrafficTarget {
	return servingv1.TrafficTarget{Tag: tag, RevisionName: name, Percent: ptr.Int64(percent)}
}

// defaultedServiceTraffic returns a copy of a v1 Service's traffic with
// Knative's defaults applied, as the apiserver applies them before storing.
func defaultedServiceTraffic(traffic []servingv1.TrafficTarget) []servingv1.TrafficTarget {
	rs := servingv1.RouteSpec{Traffic: traffic}
	rs = *rs.DeepCopy()
	rs.SetDefaults(servingv1.WithDefaultConfigurationName(apis.WithinSpec(context.Background())))
	return rs.Traffic
}

// canonicalV1ServiceSpec is the form of a v1 ServiceSpec in which two specs
// that mean the same are equal: traffic defaulted as Knative does, and the
// knbox annotations of the template that no longer describe it dropped.
func canonicalV1ServiceSpec(in *servingv1.ServiceSpec) *servingv1.ServiceSpec {
	out := in.DeepCopy()
	out.Traffic = defaultedServiceTraffic(out.Traffic)
	tmpl := &out.Template
	tmpl.Annotations = dropStaleRevisionAnnotations(tmpl.Annotations, &tmpl.Spec)
	return out
}

func parseV1Traffic(s string) ([]servingv1.TrafficTarget, *apis.FieldError) {
	var traffic []servingv1.TrafficTarget
	if err := json.Unmarshal([]byte(s), &traffic); err != nil {
		return nil, &apis.FieldError{
			Message: "not a JSON list of v1 traffic targets",
			Paths:   []string{"metadata.annotations[" + V1TrafficAnnotation + "]"},
			Details: err.Error(),
		}
	}
	return traffic, nil
}

// ConfigurationToV1 converts a v1alpha1 Configuration to the storage version.
func ConfigurationToV1(in *Configuration) (*servingv1.Configuration, error) {
	if err := in.Validate(context.Background()); err != nil {
		return nil, err
	}
	return &servingv1.Configuration{
		TypeMeta:   v1TypeMeta("Configuration"),
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Spec:       configurationSpecToV1(&in.Spec),
		Status: servingv1.ConfigurationStatus{
			Status: *in.Status.Status.DeepCopy(),
			ConfigurationStatusFields: servingv1.ConfigurationStatusFields{
				LatestReadyRevisionName:   in.Status.LatestReadyRevisionName,
				LatestCreatedRevisionName: in.Status.LatestCreatedRevisionName,
			},
		},
	}, nil
}

// ConfigurationFromV1 converts a stored v1 Configuration to v1alpha1. It
// fails for a template the seed API cannot express (see RevisionFromV1).
func ConfigurationFromV1(in *servingv1.Configuration) (*Configuration, error) {
	spec, err := configurationSpecFromV1(&in.Spec)
	if err != nil {
		return nil, err
	}
	return &Configuration{
		TypeMeta:   v1alpha1TypeMeta("Configuration"),
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Spec:       spec,
		Status: ConfigurationStatus{
			Status:                    *in.Status.Status.DeepCopy(),
			LatestReadyRevisionName:   in.Status.LatestReadyRevisionName,
			LatestCreatedRevisionName: in.Status.LatestCreatedRevisionName,
		},
	}, nil
}

// configurationSpecToV1 converts a validated ConfigurationSpec.
func configurationSpecToV1(in *ConfigurationSpec) servingv1.ConfigurationSpec {
	tmpl := servingv1.RevisionTemplateSpec{ObjectMeta: *in.RevisionTemplate.ObjectMeta.DeepCopy()}
	tmpl.Spec, tmpl.Annotations = revisionSpecToV1(&in.RevisionTemplate.Spec, tmpl.Annotations)
	tmpl.Annotations, _ = takeAnnotation(tmpl.Annotations, BuildAnnotation)
	if in.Build != nil {
		if b, fe := ParseBuild(in.Build.Raw); fe == nil {
			tmpl.Annotations = setAnnotation(tmpl.Annotations, BuildAnnotation, canonicalBuild(b))
		}
	}
	return servingv1.ConfigurationSpec{Template: tmpl}
}

func configurationSpecFromV1(in *servingv1.ConfigurationSpec) (ConfigurationSpec, error) {
	tmpl := RevisionTemplateSpec{ObjectMeta: *in.Template.ObjectMeta.DeepCopy()}
	var err error
	tmpl.Spec, tmpl.Annotations, err = revisionSpecFromV1(&in.Template.Spec, tmpl.Annotations)
	if err != nil {
		return ConfigurationSpec{}, fmt.Errorf("spec.template.spec.%w", err)
	}
	out := ConfigurationSpec{RevisionTemplate: tmpl}
	var raw string
	out.RevisionTemplate.Annotations, raw = takeAnnotation(out.RevisionTemplate.Annotations, BuildAnnotation)
	if b, fe := ParseBuild([]byte(raw)); raw != "" && fe == nil {
		out.Build = &k8sruntime.RawExtension{Raw: []byte(canonicalBuild(b))}
	}
	return out, nil
}

// RevisionToV1 converts a v1alpha1 Revision to the storage version.
func RevisionToV1(in *Revision) (*servingv1.Revision, error) {
	if err := in.Validate(context.Background()); err != nil {
		return nil, err
	}
	out := &servingv1.Revision{
		TypeMeta:   v1TypeMeta("Revision"),
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Status: servingv1.RevisionStatus{
			Status: *in.Status.Status.DeepCopy(),
			LogURL: in.Status.LogURL,
		},
	}
	out.Spec, out.Annotations = revisionSpecToV1(&in.Spec, out.Annotations)
	// A Revision's own Build shows as its buildRef (RevisionFromV1); an
	// inline build is a Configuration's.
	out.Annotations, _ = takeAnnotation(out.Annotations, BuildAnnotation)
	if in.Status.ImageDigest != "" {
		var name string
		if in.Spec.Container != nil {
			name = in.Spec.Container.Name
		}
		out.Status.ContainerStatuses = []servingv1.ContainerStatus{{Name: name, ImageDigest: in.Status.ImageDigest}}
	}
	return out, nil
}

// RevisionFromV1 converts a stored v1 Revision to v1alpha1. It fails for a
// Revision the seed API cannot express: more than one container, or a v1
// field that the v1alpha1 RevisionSpec does not carry.
func RevisionFromV1(in *servingv1.Revision) (*Revision, error) {
	out := &Revision{
		TypeMeta:   v1alpha1TypeMeta("Revision"),
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Status: RevisionStatus{
			Status: *in.Status.Status.DeepCopy(),
			LogURL: in.Status.LogURL,
		},
	}
	var err error
	out.Spec, out.Annotations, err = revisionSpecFromV1(&in.Spec, out.Annotations)
	if err != nil {
		return nil, fmt.Errorf("spec.%w", err)
	}
	var inline string
	out.Annotations, inline = takeAnnotation(out.Annotations, BuildAnnotation)
	if inline != "" && out.Spec.BuildRef == nil {
		// The Build stamped from its Configuration's build, named after it.
		out.Spec.BuildRef = &corev1.ObjectReference{APIVersion: buildKind.GroupVersion().String(), Kind: buildKind.Kind, Name: in.Name}
	}
	out.Status.ImageDigest = imageDigest(in)
	return out, nil
}

// imageDigest is the digest of the Revision's one container: the status of
// the container of that name, or else the first.
func imageDigest(in *servingv1.Revision) string {
	cs := in.Status.ContainerStatuses
	if len(in.Spec.Containers) == 1 {
		for _, s := range cs {
			if s.Name == in.Spec.Containers[0].Name {
				return s.ImageDigest
			}
		}
	}
	if len(cs) > 0 {
		return cs[0].ImageDigest
	}
	return ""
}

// revisionSpecToV1 converts a validated RevisionSpec and returns it with the
// annotations of the object (or template) it belongs to, updated to record
// concurrencyModel and servingState.
func revisionSpecToV1(in *RevisionSpec, annotations map[string]string) (servingv1.RevisionSpec, map[string]string) {
	in = in.DeepCopy()
	out := servingv1.RevisionSpec{
		PodSpec: corev1.PodSpec{
			Volumes:                      in.Volumes,
			ServiceAccountName:           in.ServiceAccountName,
			RuntimeClassName:             in.RuntimeClassName,
			ImagePullSecrets:             in.ImagePullSecrets,
			SecurityContext:              in.SecurityContext,
			EnableServiceLinks:           in.EnableServiceLinks,
			AutomountServiceAccountToken: in.AutomountServiceAccountToken,
		},
		ContainerConcurrency:        in.ContainerConcurrency,
		TimeoutSeconds:              in.TimeoutSeconds,
		ResponseStartTimeoutSeconds: in.ResponseStartTimeoutSeconds,
		IdleTimeoutSeconds:          in.IdleTimeoutSeconds,
	}
	if in.Container != nil {
		out.Containers = []corev1.Container{*in.Container}
	}
	if in.ConcurrencyModel == ConcurrencyModelSingle && out.ContainerConcurrency == nil {
		out.ContainerConcurrency = ptr.Int64(1)
	}
	annotations, _ = takeAnnotation(annotations, ConcurrencyModelAnnotation)
	annotations, _ = takeAnnotation(annotations, ServingStateAnnotation)
	annotations = setAnnotation(annotations, ConcurrencyModelAnnotation, string(in.ConcurrencyModel))
	annotations = setAnnotation(annotations, ServingStateAnnotation, string(in.ServingState))
	return out, buildRefToV1(in, annotations)
}

// revisionSpecFromV1 converts a v1 RevisionSpec, reading (and removing)
// the knbox annotations of the object or template it belongs to. An error
// names the v1 field, relative to the spec, that cannot be expressed.
func revisionSpecFromV1(in *servingv1.RevisionSpec, annotations map[string]string) (RevisionSpec, map[string]string, error) {
	if n := len(in.Containers); n > 1 {
		return RevisionSpec{}, nil, fmt.Errorf("containers: %d containers cannot be expressed in %s, which has exactly one container", n, SchemeGroupVersion)
	}
	if extra := unexpressedPodSpecFields(&in.PodSpec); len(extra) > 0 {
		return RevisionSpec{}, nil, fmt.Errorf("%s: cannot be expressed in %s", strings.Join(extra, ", "), SchemeGroupVersion)
	}
	in = in.DeepCopy()
	out := RevisionSpec{
		Volumes:                      in.Volumes,
		ServiceAccountName:           in.ServiceAccountName,
		RuntimeClassName:             in.RuntimeClassName,
		ImagePullSecrets:             in.ImagePullSecrets,
		SecurityContext:              in.SecurityContext,
		EnableServiceLinks:           in.EnableServiceLinks,
		AutomountServiceAccountToken: in.AutomountServiceAccountToken,
		ContainerConcurrency:         in.ContainerConcurrency,
		TimeoutSeconds:               in.TimeoutSeconds,
		ResponseStartTimeoutSeconds:  in.ResponseStartTimeoutSeconds,
		IdleTimeoutSeconds:           in.IdleTimeoutSeconds,
	}
	if len(in.Containers) == 1 {
		out.Container = &in.Containers[0]
	}
	var model, state string
	annotations, model = takeAnnotation(annotations, ConcurrencyModelAnnotation)
	annotations, state = takeAnnotation(annotations, ServingStateAnnotation)
	if m, ok := concurrencyModelFromV1(model, in.ContainerConcurrency); ok {
		out.ConcurrencyModel = m
		if m == ConcurrencyModelSingle {
			// Single means 1; the v1alpha1 form leaves it implied.
			out.ContainerConcurrency = nil
		}
	}
	if validServingState(ServingState(state)) {
		out.ServingState = ServingState(state)
	}
	annotations = buildRefFromV1(&out, annotations)
	return out, annotations, nil
}

// concurrencyModelFromV1 reports the concurrency model recorded in a v1
// annotation, and whether it still describes the spec: a v1 client may have
// changed containerConcurrency since (then the record is dropped).
func concurrencyModelFromV1(model string, cc *int64) (ConcurrencyModel, bool) {
	switch m := ConcurrencyModel(model); m {
	case ConcurrencyModelSingle:
		return m, cc != nil && *cc == 1
	case ConcurrencyModelMulti:
		return m, cc == nil || *cc != 1
	}
	return "", false
}

func validServingState(s ServingState) bool {
	switch s {
	case ServingStateActive, ServingStateReserve, ServingStateRetired:
		return true
	}
	return false
}

// dropStaleRevisionAnnotations removes the knbox annotations that
// revisionSpecFromV1 would ignore, as no longer describing spec.
func dropStaleRevisionAnnotations(annotations map[string]string, spec *servingv1.RevisionSpec) map[string]string {
	if m, ok := annotations[ConcurrencyModelAnnotation]; ok {
		if _, fresh := concurrencyModelFromV1(m, spec.ContainerConcurrency); !fresh {
			annotations, _ = takeAnnotation(annotations, ConcurrencyModelAnnotation)
		}
	}
	if s, ok := annotations[ServingStateAnnotation]; ok && !validServingState(ServingState(s)) {
		annotations, _ = takeAnnotation(annotations, ServingStateAnnotation)
	}
	return annotations
}

// unexpressedPodSpecFields lists, by JSON name, the fields of a v1 PodSpec
// that the v1alpha1 RevisionSpec does not carry and that are set.
func unexpressedPodSpecFields(ps *corev1.PodSpec) []string {
	rest := ps.DeepCopy()
	rest.Containers = nil
	rest.Volumes = nil
	rest.ServiceAccountName = ""
	rest.RuntimeClassName = nil
	rest.ImagePullSecrets = nil
	rest.SecurityContext = nil
	rest.EnableServiceLinks = nil
	rest.AutomountServiceAccountToken = nil
	if equality.Semantic.DeepEqual(rest, &corev1.PodSpec{}) {
		return nil
	}
	raw, err := json.Marshal(rest)
	if err != nil {
		return []string{"spec"}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return []string{"spec"}
	}
	var names []string
	for k, v := range fields {
		if string(v) != "null" {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		// Set but empty, e.g. an empty slice: still not carried.
		names = []string{"podSpec"}
	}
	sort.Strings(names)
	return names
}

// RouteToV1 converts a v1alpha1 Route to the storage version.
func RouteToV1(in *Route) (*servingv1.Route, error) {
	if err := in.Validate(context.Background()); err != nil {
		return nil, err
	}
	return &servingv1.Route{
		TypeMeta:   v1TypeMeta("Route"),
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Spec:       servingv1.RouteSpec{Traffic: trafficToV1(in.Spec.Traffic)},
		Status: servingv1.RouteStatus{
			Status:            *in.Status.Status.DeepCopy(),
			RouteStatusFields: routeStatusFieldsToV1(&in.Status.RouteStatusFields),
		},
	}, nil
}

// RouteFromV1 converts a stored v1 Route to v1alpha1. latestRevision is not
// in the seed API: it must be what v1 defaulting makes of the target
// (true exactly when there is no revisionName).
func RouteFromV1(in *servingv1.Route) (*Route, error) {
	for i, t := range in.Spec.Traffic {
		if t.LatestRevision != nil && *t.LatestRevision != (t.RevisionName == "") {
			return nil, fmt.Errorf("spec.traffic[%d].latestRevision: %t with revisionName %q cannot be expressed in %s",
				i, *t.LatestRevision, t.RevisionName, SchemeGroupVersion)
		}
	}
	return &Route{
		TypeMeta:   v1alpha1TypeMeta("Route"),
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Spec:       RouteSpec{Traffic: trafficFromV1(in.Spec.Traffic)},
		Status: RouteStatus{
			Status:            *in.Status.Status.DeepCopy(),
			RouteStatusFields: routeStatusFieldsFromV1(&in.Status.RouteStatusFields),
		},
	}, nil
}

// trafficToV1 converts traffic targets; latestRevision is left to v1
// defaulting, which derives it as the seed API means it.
func trafficToV1(in []TrafficTarget) []servingv1.TrafficTarget {
	if in == nil {
		return nil
	}
	out := make([]servingv1.TrafficTarget, len(in))
	for i, t := range in {
		t := t.DeepCopy()
		out[i] = servingv1.TrafficTarget{
			Tag:               t.Name,
			RevisionName:      t.RevisionName,
			ConfigurationName: t.ConfigurationName,
			Percent:           t.Percent,
			URL:               t.URL,
		}
	}
	return out
}

func trafficFromV1(in []servingv1.TrafficTarget) []TrafficTarget {
	if in == nil {
		return nil
	}
	out := make([]TrafficTarget, len(in))
	for i, t := range in {
		t := t.DeepCopy()
		out[i] = TrafficTarget{
			Name:              t.Tag,
			RevisionName:      t.RevisionName,
			ConfigurationName: t.ConfigurationName,
			Percent:           t.Percent,
			URL:               t.URL,
		}
	}
	return out
}

func serviceStatusToV1(in *ServiceStatus) servingv1.ServiceStatus {
	return servingv1.ServiceStatus{
		Status: *in.Status.DeepCopy(),
		ConfigurationStatusFields: servingv1.ConfigurationStatusFields{
			LatestReadyRevisionName:   in.LatestReadyRevisionName,
			LatestCreatedRevisionName: in.LatestCreatedRevisionName,
		},
		RouteStatusFields: routeStatusFieldsToV1(&in.RouteStatusFields),
	}
}

func serviceStatusFromV1(in *servingv1.ServiceStatus) ServiceStatus {
	return ServiceStatus{
		Status:                    *in.Status.DeepCopy(),
		LatestReadyRevisionName:   in.LatestReadyRevisionName,
		LatestCreatedRevisionName: in.LatestCreatedRevisionName,
		RouteStatusFields:         routeStatusFieldsFromV1(&in.RouteStatusFields),
	}
}

// routeStatusFieldsToV1: url wins over domain (which is its host); the
// hostname of address wins over the deprecated domainInternal.
func routeStatusFieldsToV1(in *RouteStatusFields) servingv1.RouteStatusFields {
	out := servingv1.RouteStatusFields{
		URL:     in.URL.DeepCopy(),
		Traffic: trafficToV1(in.Traffic),
	}
	if out.URL == nil && in.Domain != "" {
		out.URL = hostURL(in.Domain)
	}
	internal := in.DomainInternal
	if in.Address != nil && in.Address.Hostname != "" {
		internal = in.Address.Hostname
	}
	if internal != "" {
		out.Address = &duckv1.Addressable{URL: hostURL(internal)}
	}
	return out
}

func routeStatusFieldsFromV1(in *servingv1.RouteStatusFields) RouteStatusFields {
	out := RouteStatusFields{
		URL:     in.URL.DeepCopy(),
		Traffic: trafficFromV1(in.Traffic),
	}
	if in.URL != nil {
		out.Domain = in.URL.Host
	}
	if in.Address != nil && in.Address.URL != nil && in.Address.URL.Host != "" {
		out.DomainInternal = in.Address.URL.Host
		out.Address = &Addressable{Hostname: in.Address.URL.Host}
	}
	return out
}

func hostURL(host string) *apis.URL {
	return &apis.URL{Scheme: "http", Host: host}
}

func v1TypeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: servingv1.SchemeGroupVersion.String(), Kind: kind}
}

func v1alpha1TypeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: SchemeGroupVersion.String(), Kind: kind}
}

// takeAnnotation returns annotations without key, and the value key had.
// The map given is not modified; a map left empty becomes nil.
func takeAnnotation(annotations map[string]string, key string) (map[string]string, string) {
	v, ok := annotations[key]
	if !ok {
		return annotations, ""
	}
	out := make(map[string]string, len(annotations)-1)
	for k, v := range annotations {
		if k != key {
			out[k] = v
		}
	}
	if len(out) == 0 {
		out = nil
	}
	return out, v
}

// setAnnotation returns annotations with key set to value, or unchanged if
// value is empty. The map given is not modified.
func setAnnotation(annotations map[string]string, key, value string) map[string]string {
	if value == "" {
		return annotations
	}
	out := make(map[string]string, len(annotations)+1)
	for k, v := range annotations {
		out[k] = v
	}
	out[key] = value
	return out
}
