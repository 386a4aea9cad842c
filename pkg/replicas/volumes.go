package replicas

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/serviceaccount"
)

// volumes returns the revision's volumes with their files read from the
// informers' caches and its ServiceAccount tokens issued, and when the
// earliest of those tokens is to be refreshed (zero: none). A missing
// Secret or ConfigMap that is not optional, or a token that cannot be
// issued, is a config error.
func (m *Manager) volumes(ns, sa string, vols []corev1.Volume) ([]pod.Volume, time.Time, error) {
	out := make([]pod.Volume, 0, len(vols))
	var refresh time.Time
	for _, v := range vols {
		if v.EmptyDir != nil {
			out = append(out, pod.Volume{Name: v.Name, EmptyDir: true, Medium: v.EmptyDir.Medium, SizeLimit: v.EmptyDir.SizeLimit})
			continue
		}
		files, at, err := m.volumeFiles(ns, sa, v)
		if err != nil {
			return nil, time.Time{}, configErrorf("volume %s: %w", v.Name, err)
		}
		refresh = earliest(refresh, at)
		out = append(out, pod.Volume{Name: v.Name, Files: files})
	}
	return out, refresh, nil
}

// earliest is the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// serviceAccountName is the ServiceAccount a revision's instances run as:
// "default" when it names none, as on a cluster.
func serviceAccountName(spec *corev1.PodSpec) string {
	if spec.ServiceAccountName != "" {
		return spec.ServiceAccountName
	}
	return "default"
}

// hasToken tells whether a volume holds a ServiceAccount token, which is
// issued for each instance and refreshed before it expires.
func hasToken(v corev1.Volume) bool {
	if v.Projected == nil {
		return false
	}
	for _, src := range v.Projected.Sources {
		if src.ServiceAccountToken != nil {
			return true
		}
	}
	return false
}

// volumeFiles is what a Secret, ConfigMap or projected volume holds now:
// its files by slash-separated path relative to the volume, and when its
// ServiceAccount tokens (issued for ServiceAccount sa) are to be refreshed
// (zero: it holds none).
func (m *Manager) volumeFiles(ns, sa string, v corev1.Volume) (map[string]pod.File, time.Time, error) {
	files := map[string]pod.File{}
	var refresh time.Time
	switch {
	case v.Secret != nil:
		if err := m.secretFiles(files, ns, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, v.Secret.DefaultMode); err != nil {
			return nil, refresh, err
		}
	case v.ConfigMap != nil:
		if err := m.configMapFiles(files, ns, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, v.ConfigMap.DefaultMode); err != nil {
			return nil, refresh, err
		}
	case v.Projected != nil:
		for j, src := range v.Projected.Sources {
			var err error
			switch {
			case src.Secret != nil:
				err = m.secretFiles(files, ns, src.Secret.Name, src.Secret.Items, src.Secret.Optional, v.Projected.DefaultMode)
			case src.ConfigMap != nil:
				err = m.configMapFiles(files, ns, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, v.Projected.DefaultMode)
			case src.ServiceAccountToken != nil:
				var at time.Time
				at, err = m.tokenFile(files, ns, sa, src.ServiceAccountToken, v.Projected.DefaultMode)
				if err != nil {
					err = fmt.Errorf("sources[%d]: %w", j, err)
				}
				refresh = earliest(refresh, at)
			case src.DownwardAPI != nil:
				err = downwardFiles(files, ns, src.DownwardAPI, v.Projected.DefaultMode)
			default:
				err = fmt.Errorf("sources[%d]: only secret, configMap, serviceAccountToken and downwardAPI sources are supported", j)
			}
			if err != nil {
				return nil, time.Time{}, err
			}
		}
	default:
		return nil, refresh, errors.New("only secret, configMap, projected and emptyDir volumes are supported")
	}
	// A path cannot be a file and a directory at once ("a" and "a/b").
	for p := range files {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := files[d]; ok {
				return nil, time.Time{}, fmt.Errorf("item paths %q and %q: %q cannot be a file and a directory", d, p, d)
			}
		}
	}
	return files, refresh, nil
}

// tokenIssueTimeout bounds one token issue (a local read and a signature).
const tokenIssueTimeout = 10 * time.Second

// tokenFile adds the token of a projected serviceAccountToken source to
// files, as the kubelet does through TokenRequest: for ServiceAccount sa,
// with the source's audience (none: the API's) and lifetime (none: an
// hour), and returns when to refresh it (after 80% of its lifetime or 24
// hours, as the kubelet).
func (m *Manager) tokenFile(files map[string]pod.File, ns, sa string, src *corev1.ServiceAccountTokenProjection, defMode *int32) (time.Time, error) {
	if m.opts.Tokens == nil {
		return time.Time{}, errors.New("serviceAccountToken: this knbox issues no ServiceAccount tokens")
	}
	p := path.Clean(src.Path)
	if src.Path == "" || p == "." || path.IsAbs(p) || strings.HasPrefix(p, "..") {
		return time.Time{}, fmt.Errorf("serviceAccountToken: path %q must be relative, stay in the volume and not start with '..'", src.Path)
	}
	var aud []string
	if src.Audience != "" {
		aud = []string{src.Audience}
	}
	var secs int64
	if src.ExpirationSeconds != nil {
		secs = *src.ExpirationSeconds
	}
	ctx, cancel := context.WithTimeout(m.ctx, tokenIssueTimeout)
	defer cancel()
	issued := time.Now()
	tok, exp, err := m.opts.Tokens.Issue(ctx, ns, sa, aud, secs, nil)
	if err != nil {
		return time.Time{}, fmt.Errorf("serviceAccountToken for serviceaccount %q: %w", sa, err)
	}
	mode := os.FileMode(0o644)
	if defMode != nil {
		mode = os.FileMode(*defMode & 0o777)
	}
	files[p] = pod.File{Data: []byte(tok), Mode: mode}
	return serviceaccount.RefreshAt(issued, exp), nil
}

func (m *Manager) secretFiles(files map[string]pod.File, ns, name string, items []corev1.KeyToPath, optional *bool, mode *int32) error {
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

func (m *Manager) configMapFiles(files map[string]pod.File, ns, name string, items []corev1.KeyToPath, optional *bool, mode *int32) error {
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
func keyFiles(files map[string]pod.File, what string, data map[string][]byte, items []corev1.KeyToPath, optional *bool, defMode *int32) error {
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
		if it.Path == "" || p == "." || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
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
		files[p] = pod.File{Data: v, Mode: m}
	}
	return nil
}

// sources names the Secrets and ConfigMaps a revision reads (env, envFrom,
// volumes, imagePullSecrets), as "Secret/<name>" and "ConfigMap/<name>".
func sources(spec *corev1.PodSpec) map[string]bool {
	out := map[string]bool{}
	for _, c := range spec.Containers {
		for _, from := range c.EnvFrom {
			if from.ConfigMapRef != nil {
				out["ConfigMap/"+from.ConfigMapRef.Name] = true
			}
			if from.SecretRef != nil {
				out["Secret/"+from.SecretRef.Name] = true
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				out["Secret/"+r.Name] = true
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				out["ConfigMap/"+r.Name] = true
			}
		}
	}
	for _, v := range spec.Volumes {
		for k := range volumeSources(serviceAccountName(spec), v) {
			out[k] = true
		}
	}
	for _, s := range spec.ImagePullSecrets {
		out["Secret/"+s.Name] = true
	}
	if spec.ServiceAccountName != "" {
		out["ServiceAccount/"+spec.ServiceAccountName] = true
	}
	return out
}

// volumeSources names the Secrets, ConfigMaps and ServiceAccount (sa, for
// its tokens) one volume reads.
func volumeSources(sa string, v corev1.Volume) map[string]bool {
	out := map[string]bool{}
	switch {
	case v.Secret != nil:
		out["Secret/"+v.Secret.SecretName] = true
	case v.ConfigMap != nil:
		out["ConfigMap/"+v.ConfigMap.Name] = true
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			if src.Secret != nil {
				out["Secret/"+src.Secret.Name] = true
			}
			if src.ConfigMap != nil {
				out["ConfigMap/"+src.ConfigMap.Name] = true
			}
			if src.ServiceAccountToken != nil {
				out["ServiceAccount/"+sa] = true
			}
		}
	}
	return out
}

// The ServiceAccount volume every instance gets when the API is served
// inside instances (Options.API), as Kubernetes gives every pod: a
// projected volume of a token of the pod's ServiceAccount for the API's
// audience (expiring in an hour and some seconds, refreshed by the
// kubelet, here by the revision), the cluster's CA from the ConfigMap
// kube-root-ca.crt and the namespace, mounted read-only in every container
// at ServiceAccountMountPath. A container that mounts something else
// there keeps its own.
const (
	ServiceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// APIAccessVolume is the volume's name (Kubernetes' kube-api-access-
	// with a random suffix; one fixed one here, since revisions' volume
	// names are DNS labels a user might pick, a revision that has one of
	// this name gets no ServiceAccount volume).
	APIAccessVolume = "kube-api-access-knbox"
	// apiTokenSeconds is the token's lifetime, Kubernetes' (3607: an hour
	// and seven seconds, so that clients can tell it from a user's).
	apiTokenSeconds = 3607
	rootCAConfigMap = "kube-root-ca.crt"
	rootCAKey       = "ca.crt"
)

// automount tells whether rev's instances get the ServiceAccount volume:
// when the API is served inside instances, unless the revision's
// automountServiceAccountToken (Knative allows false only) or else its
// ServiceAccount's says false, as Kubernetes' ServiceAccount admission
// decides.
func (m *Manager) automount(rev *servingv1.Revision) bool {
	if !m.opts.API.IsValid() || m.opts.Tokens == nil {
		return false
	}
	if a := rev.Spec.AutomountServiceAccountToken; a != nil {
		return *a
	}
	if m.serviceAccounts != nil {
		sa, err := m.serviceAccounts.ServiceAccounts(rev.Namespace).Get(serviceAccountName(&rev.Spec.PodSpec))
		if err == nil && sa.AutomountServiceAccountToken != nil {
			return *sa.AutomountServiceAccountToken
		}
	}
	for _, v := range rev.Spec.Volumes {
		if v.Name == APIAccessVolume {
			return false
		}
	}
	return true
}

// addAPIAccess adds the ServiceAccount volume to rev (a copy the Manager
// owns) and mounts it in every container that has nothing mounted at
// ServiceAccountMountPath, as the ServiceAccount admission plugin does.
func addAPIAccess(rev *servingv1.Revision) {
	mode := int32(0o644)
	secs := int64(apiTokenSeconds)
	rev.Spec.Volumes = append(rev.Spec.Volumes, corev1.Volume{Name: APIAccessVolume, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{DefaultMode: &mode, Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &secs}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: rootCAConfigMap},
				Items: []corev1.KeyToPath{{Key: rootCAKey, Path: rootCAKey}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}},
	}})
	for i := range rev.Spec.Containers {
		c := &rev.Spec.Containers[i]
		if slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
			return path.Clean(vm.MountPath) == ServiceAccountMountPath
		}) {
			continue
		}
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: APIAccessVolume, ReadOnly: true, MountPath: ServiceAccountMountPath})
	}
}

// downwardFiles adds the files of a projected downwardAPI source: the
// fieldRef metadata.namespace (what the ServiceAccount volume needs); other
// fields are refused by name.
func downwardFiles(files map[string]pod.File, ns string, src *corev1.DownwardAPIProjection, defMode *int32) error {
	for i, it := range src.Items {
		p := path.Clean(it.Path)
		if it.Path == "" || p == "." || path.IsAbs(p) || strings.HasPrefix(p, "..") {
			return fmt.Errorf("downwardAPI: items[%d].path %q must be relative, stay in the volume and not start with '..'", i, it.Path)
		}
		if it.FieldRef == nil || it.FieldRef.FieldPath != "metadata.namespace" {
			return fmt.Errorf("downwardAPI: items[%d] (%s): only fieldRef metadata.namespace is supported", i, it.Path)
		}
		mode := os.FileMode(0o644)
		if defMode != nil {
			mode = os.FileMode(*defMode & 0o777)
		}
		if it.Mode != nil {
			mode = os.FileMode(*it.Mode & 0o777)
		}
		files[p] = pod.File{Data: []byte(ns), Mode: mode}
	}
	return nil
}
