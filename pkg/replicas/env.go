package replicas

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/pod"
)

// configErrorf is a failure to assemble what a container needs (a Secret
// or ConfigMap missing): the kubelet's CreateContainerConfigError.
func configErrorf(format string, args ...any) error {
	return &pod.ConfigError{Err: fmt.Errorf(format, args...)}
}

// envName is what the kubelet accepts as an environment variable name from
// envFrom; keys that are not are skipped, as the kubelet skips them.
var envName = regexp.MustCompile(`^[-._a-zA-Z][-._a-zA-Z0-9]*$`)

// instanceMeta is what the downward API (fieldRef) can tell an instance.
type instanceMeta struct {
	name string // the instance's name, as a pod's
}

// buildEnv returns the container's environment: PORT (if port is not 0:
// the serving container's) and the K_* variables of the runtime contract
// (every container's, as Knative gives them), then envFrom, then env, with
// valueFrom resolved from the informers' caches.
func (m *Manager) buildEnv(rev *servingv1.Revision, c *corev1.Container, port int32, meta instanceMeta) ([]corev1.EnvVar, error) {
	var env []corev1.EnvVar
	add := func(name, value string) { env = append(env, corev1.EnvVar{Name: name, Value: value}) }
	if port != 0 {
		add("PORT", strconv.Itoa(int(port)))
	}
	add("K_SERVICE", rev.Labels[serving.ServiceLabelKey])
	add("K_CONFIGURATION", rev.Labels[serving.ConfigurationLabelKey])
	add("K_REVISION", rev.Name)
	ns := rev.Namespace
	for i, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, err := m.configMap(ns, from.ConfigMapRef.Name)
			if err != nil {
				if isNotFound(err) && ptrTrue(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, configErrorf("envFrom[%d]: %w", i, err)
			}
			data = cm.Data
		case from.SecretRef != nil:
			sec, err := m.secret(ns, from.SecretRef.Name)
			if err != nil {
				if isNotFound(err) && ptrTrue(from.SecretRef.Optional) {
					continue
				}
				return nil, configErrorf("envFrom[%d]: %w", i, err)
			}
			data = secretData(sec)
		default:
			continue
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			name := from.Prefix + k
			if !envName.MatchString(name) {
				continue
			}
			add(name, data[k])
		}
	}
	for i, e := range c.Env {
		if e.ValueFrom == nil {
			add(e.Name, e.Value)
			continue
		}
		v, ok, err := m.valueFrom(rev, c, e.ValueFrom, meta)
		if err != nil {
			return nil, configErrorf("env[%d] (%s): %w", i, e.Name, err)
		}
		if ok {
			add(e.Name, v)
		}
	}
	return m.withAPIEnv(env), nil
}

// withAPIEnv puts before env the variables the kubelet gives every
// container for the Service "kubernetes" (Options.API), those env sets
// itself excepted: the container's own win, as on a cluster.
func (m *Manager) withAPIEnv(env []corev1.EnvVar) []corev1.EnvVar {
	api := m.opts.API
	if !api.IsValid() {
		return env
	}
	host, port := api.Addr().String(), strconv.Itoa(int(api.Port()))
	url := "tcp://" + api.String()
	pre := "KUBERNETES_PORT_" + port + "_TCP"
	svc := []corev1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", Value: host},
		{Name: "KUBERNETES_SERVICE_PORT", Value: port},
		{Name: "KUBERNETES_SERVICE_PORT_HTTPS", Value: port},
		{Name: "KUBERNETES_PORT", Value: url},
		{Name: pre, Value: url},
		{Name: pre + "_PROTO", Value: "tcp"},
		{Name: pre + "_PORT", Value: port},
		{Name: pre + "_ADDR", Value: host},
	}
	out := make([]corev1.EnvVar, 0, len(svc)+len(env))
	for _, v := range svc {
		if !slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == v.Name }) {
			out = append(out, v)
		}
	}
	return append(out, env...)
}

// valueFrom resolves one env valueFrom; ok is false for an optional key
// that is missing (the variable is then not set).
func (m *Manager) valueFrom(rev *servingv1.Revision, c *corev1.Container, src *corev1.EnvVarSource, meta instanceMeta) (string, bool, error) {
	ns := rev.Namespace
	switch {
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		sec, err := m.secret(ns, ref.Name)
		if err != nil {
			if isNotFound(err) && ptrTrue(ref.Optional) {
				return "", false, nil
			}
			return "", false, err
		}
		v, ok := secretData(sec)[ref.Key]
		if !ok {
			if ptrTrue(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("secret %q has no key %q", ref.Name, ref.Key)
		}
		return v, true, nil
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := m.configMap(ns, ref.Name)
		if err != nil {
			if isNotFound(err) && ptrTrue(ref.Optional) {
				return "", false, nil
			}
			return "", false, err
		}
		if v, ok := cm.Data[ref.Key]; ok {
			return v, true, nil
		}
		if v, ok := cm.BinaryData[ref.Key]; ok {
			return string(v), true, nil
		}
		if ptrTrue(ref.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("configmap %q has no key %q", ref.Name, ref.Key)
	case src.FieldRef != nil:
		v, err := fieldRef(rev, src.FieldRef.FieldPath, meta)
		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		v, err := resourceFieldRef(c, src.ResourceFieldRef)
		return v, err == nil, err
	}
	return "", false, errors.New("valueFrom names no source")
}

// fieldRef answers the downward API's fields as they read for an instance.
func fieldRef(rev *servingv1.Revision, p string, meta instanceMeta) (string, error) {
	if k, ok := subscript(p, "metadata.labels"); ok {
		return rev.Labels[k], nil
	}
	if k, ok := subscript(p, "metadata.annotations"); ok {
		return rev.Annotations[k], nil
	}
	switch p {
	case "metadata.name":
		return meta.name, nil
	case "metadata.namespace":
		return rev.Namespace, nil
	case "metadata.uid":
		return string(rev.UID), nil
	case "spec.serviceAccountName":
		return rev.Spec.ServiceAccountName, nil
	case "spec.nodeName":
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("fieldRef %s: %w", p, err)
		}
		return h, nil
	case "status.podIP", "status.podIPs", "status.hostIP", "status.hostIPs":
		// The instance is reached on its own loopback.
		return "127.0.0.1", nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported", p)
}

// subscript reads "prefix['key']".
func subscript(p, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(p, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// resourceFieldRef answers limits.* and requests.* of the container, scaled
// by the divisor and rounded up as the kubelet does. An unset limit reads as
// the machine's capacity.
func resourceFieldRef(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		return "", fmt.Errorf("resourceFieldRef names container %q, not %q", ref.ContainerName, c.Name)
	}
	var q resource.Quantity
	var have bool
	switch ref.Resource {
	case "limits.cpu":
		q, have = c.Resources.Limits[corev1.ResourceCPU]
		if !have {
			q, have = *resource.NewQuantity(int64(numCPU()), resource.DecimalSI), true
		}
	case "limits.memory":
		q, have = c.Resources.Limits[corev1.ResourceMemory]
		if !have {
			q, have = *resource.NewQuantity(machineMemory(), resource.BinarySI), true
		}
	case "requests.cpu":
		if q, have = c.Resources.Requests[corev1.ResourceCPU]; !have {
			q, have = c.Resources.Limits[corev1.ResourceCPU]
		}
	case "requests.memory":
		if q, have = c.Resources.Requests[corev1.ResourceMemory]; !have {
			q, have = c.Resources.Limits[corev1.ResourceMemory]
		}
	case "limits.ephemeral-storage", "requests.ephemeral-storage":
		q, have = c.Resources.Limits[corev1.ResourceEphemeralStorage]
	default:
		return "", fmt.Errorf("resourceFieldRef %q is not supported", ref.Resource)
	}
	if !have {
		return "0", nil
	}
	div := ref.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
	}
	v := math.Ceil(q.AsApproximateFloat64() / div.AsApproximateFloat64())
	return strconv.FormatInt(int64(v), 10), nil
}

func secretData(s *corev1.Secret) map[string]string {
	out := make(map[string]string, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

// machineMemory is the machine's memory in bytes (0 if unknown).
func machineMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

func numCPU() int { return goruntime.NumCPU() }

func isNotFound(err error) bool {
	return apierrors.IsNotFound(err) || errors.Is(err, os.ErrNotExist)
}

func ptrTrue(b *bool) bool { return b != nil && *b }
