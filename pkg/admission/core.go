package admission

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxDataBytes is the size limit of a Secret's or ConfigMap's data, as in
// Kubernetes.
const maxDataBytes = 1 << 20

func defaultNamespace(ns *corev1.Namespace) {
	ns.Status.Phase = corev1.NamespaceActive
	if len(ns.Spec.Finalizers) == 0 {
		ns.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
	}
}

func validateNamespace(ns *corev1.Namespace) field.ErrorList {
	var errs field.ErrorList
	for i, f := range ns.Spec.Finalizers {
		for _, msg := range validation.IsQualifiedName(string(f)) {
			errs = append(errs, field.Invalid(field.NewPath("spec", "finalizers").Index(i), f, msg))
		}
	}
	return errs
}

// defaultSecret applies what Kubernetes does on write: stringData is merged
// into data (write-only), the type defaults to Opaque.
func defaultSecret(s *corev1.Secret) {
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
	if len(s.StringData) > 0 {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
	}
}

func validateSecret(s, old *corev1.Secret) field.ErrorList {
	var errs field.ErrorList
	dataPath := field.NewPath("data")
	total := 0
	for k, v := range s.Data {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(dataPath.Key(k), k, msg))
		}
		total += len(v)
	}
	if total > maxDataBytes {
		errs = append(errs, field.TooLong(dataPath, "", maxDataBytes))
	}
	need := func(key string) {
		if _, ok := s.Data[key]; !ok {
			errs = append(errs, field.Required(dataPath.Key(key), fmt.Sprintf("required for a Secret of type %s", s.Type)))
		}
	}
	switch s.Type {
	case corev1.SecretTypeDockerConfigJson:
		need(corev1.DockerConfigJsonKey)
		if b, ok := s.Data[corev1.DockerConfigJsonKey]; ok && !json.Valid(b) {
			errs = append(errs, field.Invalid(dataPath.Key(corev1.DockerConfigJsonKey), "<secret contents redacted>", "must be valid JSON"))
		}
	case corev1.SecretTypeDockercfg:
		need(corev1.DockerConfigKey)
		if b, ok := s.Data[corev1.DockerConfigKey]; ok && !json.Valid(b) {
			errs = append(errs, field.Invalid(dataPath.Key(corev1.DockerConfigKey), "<secret contents redacted>", "must be valid JSON"))
		}
	case corev1.SecretTypeTLS:
		need(corev1.TLSCertKey)
		need(corev1.TLSPrivateKeyKey)
	case corev1.SecretTypeSSHAuth:
		need(corev1.SSHAuthPrivateKey)
	}
	if old != nil {
		if s.Type != old.Type {
			errs = append(errs, field.Invalid(field.NewPath("type"), s.Type, "field is immutable"))
		}
		if old.Immutable != nil && *old.Immutable {
			if s.Immutable == nil || !*s.Immutable {
				errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
			}
			if !apiequality.Semantic.DeepEqual(s.Data, old.Data) {
				errs = append(errs, field.Forbidden(dataPath, "field is immutable when `immutable` is set"))
			}
		}
	}
	return errs
}

func validateConfigMap(c, old *corev1.ConfigMap) field.ErrorList {
	var errs field.ErrorList
	total := 0
	for k, v := range c.Data {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, msg))
		}
		total += len(v)
	}
	for k, v := range c.BinaryData {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(k), k, msg))
		}
		if _, dup := c.Data[k]; dup {
			errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(k), k, "duplicate of key present in data"))
		}
		total += len(v)
	}
	if total > maxDataBytes {
		errs = append(errs, field.TooLong(field.NewPath(""), "", maxDataBytes))
	}
	if old != nil && old.Immutable != nil && *old.Immutable {
		if c.Immutable == nil || !*c.Immutable {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !apiequality.Semantic.DeepEqual(c.Data, old.Data) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
		}
		if !apiequality.Semantic.DeepEqual(c.BinaryData, old.BinaryData) {
			errs = append(errs, field.Forbidden(field.NewPath("binaryData"), "field is immutable when `immutable` is set"))
		}
	}
	return errs
}

// validateRuntimeClass follows the KEP: handler is a DNS label, required,
// and immutable.
func validateRuntimeClass(rc, old *nodev1.RuntimeClass) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("handler")
	if rc.Handler == "" {
		errs = append(errs, field.Required(p, "the name of the handler (OCI runtime) this class selects"))
	} else {
		for _, msg := range validation.IsDNS1123Label(rc.Handler) {
			errs = append(errs, field.Invalid(p, rc.Handler, msg))
		}
	}
	if old != nil && rc.Handler != old.Handler {
		errs = append(errs, field.Invalid(p, rc.Handler, "field is immutable"))
	}
	if rc.Overhead != nil {
		for name, q := range rc.Overhead.PodFixed {
			if q.Sign() < 0 {
				errs = append(errs, field.Invalid(field.NewPath("overhead", "podFixed").Key(string(name)), q.String(), "must be greater than or equal to 0"))
			}
		}
	}
	return errs
}
