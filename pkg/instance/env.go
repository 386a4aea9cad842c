package instance

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/oci"
)

// configError is a failure to assemble what a container needs (a Secret or
// ConfigMap missing, a spec the runtime refuses): the kubelet's
// CreateContainerConfigError.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

func configErrorf(format string, args ...any) error {
	return &configError{fmt.Errorf(format, args...)}
}

// envName is what the kubelet accepts as an environment variable name from
// envFrom; keys that are not are skipped, as the kubelet skips them.
var envName = regexp.MustCompile(`^[-._a-zA-Z][-._a-zA-Z0-9]*$`)

// instanceMeta is what the downward API (fieldRef) can tell an instance.
type instanceMeta struct {
	name     string // the instance's name, as a pod's
	hostname string
}

// buildEnv returns the container's environment as NAME=value: PORT (if
// port is not 0: the serving container's) and the K_* variables of the
// runtime contract (every container's, as Knative gives them), then
// envFrom, then env, with valueFrom resolved through the Lookup.
func (m *Manager) buildEnv(rev *servingv1.Revision, c *corev1.Container, port int32, meta instanceMeta) ([]string, error) {
	var env []string
	if port != 0 {
		env = append(env, "PORT="+strconv.Itoa(int(port)))
	}
	env = append(env,
		"K_SERVICE="+rev.Labels[serving.ServiceLabelKey],
		"K_CONFIGURATION="+rev.Labels[serving.ConfigurationLabelKey],
		"K_REVISION="+rev.Name,
	)
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
			env = append(env, name+"="+data[k])
		}
	}
	for i, e := range c.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
			continue
		}
		v, ok, err := m.valueFrom(rev, c, e.ValueFrom, meta)
		if err != nil {
			return nil, configErrorf("env[%d] (%s): %w", i, e.Name, err)
		}
		if ok {
			env = append(env, e.Name+"="+v)
		}
	}
	return env, nil
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

// prepareVolumes writes the revision's Secret, ConfigMap and projected
// volumes into dir (one directory per volume, laid out as writeVolume says)
// and makes emptyDir directories, and returns them as oci.Volumes.
func (m *Manager) prepareVolumes(rev *servingv1.Revision, dir string) (map[string]oci.Volume, error) {
	if len(rev.Spec.Volumes) == 0 {
		return nil, nil
	}
	out := make(map[string]oci.Volume, len(rev.Spec.Volumes))
	for i, v := range rev.Spec.Volumes {
		vdir := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if err := os.Chmod(vdir, 0o755); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		vol := oci.Volume{Path: vdir}
		if v.EmptyDir != nil {
			if err := os.Chmod(vdir, 0o1777); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			vol.Writable = true
			out[v.Name] = vol
			continue
		}
		files, err := m.volumeFiles(rev.Namespace, v)
		if err != nil {
			return nil, configErrorf("volume %s: %w", v.Name, err)
		}
		if _, err := writeVolume(vdir, files); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		out[v.Name] = vol
	}
	return out, nil
}

// volumeFiles is what a Secret, ConfigMap or projected volume holds now:
// its files by slash-separated path relative to the volume.
func (m *Manager) volumeFiles(ns string, v corev1.Volume) (map[string]volumeFile, error) {
	files := map[string]volumeFile{}
	switch {
	case v.Secret != nil:
		if err := m.secretFiles(files, ns, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, v.Secret.DefaultMode); err != nil {
			return nil, err
		}
	case v.ConfigMap != nil:
		if err := m.configMapFiles(files, ns, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, v.ConfigMap.DefaultMode); err != nil {
			return nil, err
		}
	case v.Projected != nil:
		for j, src := range v.Projected.Sources {
			var err error
			switch {
			case src.Secret != nil:
				err = m.secretFiles(files, ns, src.Secret.Name, src.Secret.Items, src.Secret.Optional, v.Projected.DefaultMode)
			case src.ConfigMap != nil:
				err = m.configMapFiles(files, ns, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, v.Projected.DefaultMode)
			default:
				err = fmt.Errorf("sources[%d]: only secret and configMap sources are supported", j)
			}
			if err != nil {
				return nil, err
			}
		}
	default:
		return nil, errors.New("only secret, configMap, projected and emptyDir volumes are supported")
	}
	// A path cannot be a file and a directory at once ("a" and "a/b").
	for p := range files {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := files[d]; ok {
				return nil, fmt.Errorf("item paths %q and %q: %q cannot be a file and a directory", d, p, d)
			}
		}
	}
	return files, nil
}

func (m *Manager) secretFiles(files map[string]volumeFile, ns, name string, items []corev1.KeyToPath, optional *bool, mode *int32) error {
	sec, err := m.secret(ns, name)
	if err != nil {
		if isNotFound(err) && ptrTrue(optional) {
			return nil
		}
		return err
	}
	data := map[string][]byte{}
	for k, v := range sec.Data {
		data[k] = v
	}
	for k, v := range sec.StringData {
		data[k] = []byte(v)
	}
	return keyFiles(files, "secret "+name, data, items, optional, mode)
}

func (m *Manager) configMapFiles(files map[string]volumeFile, ns, name string, items []corev1.KeyToPath, optional *bool, mode *int32) error {
	cm, err := m.configMap(ns, name)
	if err != nil {
		if isNotFound(err) && ptrTrue(optional) {
			return nil
		}
		return err
	}
	data := map[string][]byte{}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	return keyFiles(files, "configmap "+name, data, items, optional, mode)
}

// keyFiles adds data's keys (or the listed items) to files.
func keyFiles(files map[string]volumeFile, what string, data map[string][]byte, items []corev1.KeyToPath, optional *bool, defMode *int32) error {
	mode := os.FileMode(0o644)
	if defMode != nil {
		mode = os.FileMode(*defMode & 0o777)
	}
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if ptrTrue(optional) {
				continue
			}
			return fmt.Errorf("%s has no key %q", what, it.Key)
		}
		p := path.Clean(it.Path)
		if it.Path == "" || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			return fmt.Errorf("%s: item path %q must be relative and stay in the volume", what, it.Path)
		}
		if strings.HasPrefix(p, "..") {
			// As in Kubernetes: the volume's own ..data entries start so.
			return fmt.Errorf("%s: item path %q must not start with '..'", what, it.Path)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode & 0o777)
		}
		files[p] = volumeFile{data: v, mode: m}
	}
	return nil
}

func (m *Manager) secret(ns, name string) (*corev1.Secret, error) {
	if m.opts.Lookup == nil {
		return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
	}
	s, err := m.opts.Lookup.Secret(ns, name)
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	return s, nil
}

func (m *Manager) configMap(ns, name string) (*corev1.ConfigMap, error) {
	if m.opts.Lookup == nil {
		return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
	}
	c, err := m.opts.Lookup.ConfigMap(ns, name)
	if err != nil {
		return nil, fmt.Errorf("configmap %q: %w", name, err)
	}
	return c, nil
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

func isNotFound(err error) bool {
	return apierrors.IsNotFound(err) || errors.Is(err, os.ErrNotExist)
}

func ptrTrue(b *bool) bool { return b != nil && *b }

func isConfigError(err error) bool {
	var ce *configError
	return errors.As(err, &ce)
}
