package build

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/pod"
	"github.com/knbox/knbox/pkg/serviceaccount"
)

// RegistryAccess gives the steps credentials for knbox's embedded registry:
// a docker config (what docker, crane, ko and go-containerregistry's
// default keychain read) with a token of the Build's ServiceAccount for
// each of Hosts, at RegistryConfigDir/config.json, named by DOCKER_CONFIG
// (unless a step sets it). What the token may push is what RBAC grants the
// ServiceAccount (the knbox-registry-edit role, or edit).
type RegistryAccess struct {
	// Hosts are the registry's names as steps reach it (host:port on the
	// loopback, forwarded into the build's namespace).
	Hosts []string
	// Tokens issues the ServiceAccount tokens.
	Tokens serviceaccount.TokenIssuer
}

// The registry credentials' volume and where steps find it.
const (
	RegistryVolume    = "knbox-registry-auth"
	RegistryConfigDir = "/knbox/registry"
)

// RegistryEnv names, in every step's environment, knbox's embedded
// registry as steps reach it (host:port): first in the list, so that the
// steps' own variables may name it, e.g. KNBOX_IMAGE=$(KNBOX_REGISTRY)/ns/app:v1.
const RegistryEnv = "KNBOX_REGISTRY"

// tokenSlack is what a build's registry token outlives its timeout by.
const tokenSlack = 10 * time.Minute

// registryCredentials names the registry in every step's env (RegistryEnv),
// adds the registry credentials' volume to spec and mounts it in every
// step; it adds no credentials when the Build's ServiceAccount has no token
// to give (it does not exist).
func (c *Controller) registryCredentials(ctx context.Context, b *buildv1alpha1.Build, timeout time.Duration, spec *pod.Spec) {
	ra := c.opts.Registry
	if ra == nil || len(ra.Hosts) == 0 {
		return
	}
	for i := range spec.Containers {
		s := &spec.Containers[i]
		if !slices.ContainsFunc(s.Env, func(e corev1.EnvVar) bool { return e.Name == RegistryEnv }) {
			s.Env = append([]corev1.EnvVar{{Name: RegistryEnv, Value: ra.Hosts[0]}}, s.Env...)
		}
	}
	if ra.Tokens == nil {
		return
	}
	sa := b.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	exp := int64((timeout + tokenSlack) / time.Second)
	token, _, err := ra.Tokens.Issue(ctx, b.Namespace, sa, nil, max(exp, serviceaccount.MinExpirationSeconds), nil)
	if err != nil {
		c.log.Info("no registry credentials for a build", "namespace", b.Namespace, "build", b.Name, "serviceAccount", sa, "err", err)
		return
	}
	type auth struct {
		Auth string `json:"auth"`
	}
	cfg := struct {
		Auths map[string]auth `json:"auths"`
	}{Auths: map[string]auth{}}
	for _, h := range ra.Hosts {
		cfg.Auths[h] = auth{Auth: base64.StdEncoding.EncodeToString([]byte(sa + ":" + token))}
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return
	}
	spec.Volumes = append(spec.Volumes, pod.Volume{Name: RegistryVolume, Files: map[string]pod.File{"config.json": {Data: raw, Mode: 0o444}}})
	for i := range spec.Containers {
		s := &spec.Containers[i]
		s.VolumeMounts = append(s.VolumeMounts, corev1.VolumeMount{Name: RegistryVolume, MountPath: RegistryConfigDir, ReadOnly: true})
		set := false
		for _, e := range s.Env {
			set = set || e.Name == "DOCKER_CONFIG"
		}
		if !set {
			s.Env = append(s.Env, corev1.EnvVar{Name: "DOCKER_CONFIG", Value: RegistryConfigDir})
		}
	}
}
