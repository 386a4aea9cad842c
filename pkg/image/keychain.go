package image

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"path"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
)

// SecretsKeychain returns the credentials of Kubernetes imagePullSecrets as
// a keychain, to pass to Resolve and Pull (which try it before the Store's
// default keychain). Secrets of type kubernetes.io/dockerconfigjson and
// kubernetes.io/dockercfg are used; Secrets of other types are ignored, as
// the kubelet does.
//
// Registry keys match as the kubelet matches them: a scheme and a trailing
// "/" are ignored, "*" globs one DNS label ("*.example.com"), a port must be
// equal, and a path ("registry.example.com/team") must be a prefix of the
// repository. The most specific match wins; among equals, the earlier Secret.
// The Docker Hub keys ("https://index.docker.io/v1/", "docker.io", ...) all
// mean index.docker.io.
func SecretsKeychain(secrets []corev1.Secret) (authn.Keychain, error) {
	k := &secretsKeychain{}
	for _, sec := range secrets {
		var (
			raw []byte
			key string
		)
		switch sec.Type {
		case corev1.SecretTypeDockerConfigJson:
			key = corev1.DockerConfigJsonKey
		case corev1.SecretTypeDockercfg:
			key = corev1.DockerConfigKey
		default:
			continue
		}
		raw, ok := sec.Data[key]
		if !ok {
			if s, ok := sec.StringData[key]; ok {
				raw = []byte(s)
			}
		}
		if len(raw) == 0 {
			return nil, fmt.Errorf("secret %s/%s: no %s", sec.Namespace, sec.Name, key)
		}
		auths := map[string]dockerAuth{}
		if sec.Type == corev1.SecretTypeDockerConfigJson {
			var cfg struct {
				Auths map[string]dockerAuth `json:"auths"`
			}
			if err := json.Unmarshal(raw, &cfg); err != nil {
				return nil, fmt.Errorf("secret %s/%s: parse %s: %w", sec.Namespace, sec.Name, key, err)
			}
			auths = cfg.Auths
		} else if err := json.Unmarshal(raw, &auths); err != nil {
			return nil, fmt.Errorf("secret %s/%s: parse %s: %w", sec.Namespace, sec.Name, key, err)
		}
		// Map order is random; sort keys so that equal matches are stable.
		keys := make([]string, 0, len(auths))
		for registry := range auths {
			keys = append(keys, registry)
		}
		slices.Sort(keys)
		for _, registry := range keys {
			a := auths[registry]
			cfg, err := a.config()
			if err != nil {
				return nil, fmt.Errorf("secret %s/%s: registry %s: %w", sec.Namespace, sec.Name, registry, err)
			}
			host, p := parseRegistryKey(registry)
			if host == "" {
				continue
			}
			k.entries = append(k.entries, credEntry{host: host, path: p, auth: cfg})
		}
	}
	return k, nil
}

// dockerAuth is one entry of a docker config's "auths".
type dockerAuth struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

func (a dockerAuth) config() (authn.AuthConfig, error) {
	cfg := authn.AuthConfig{
		Username:      a.Username,
		Password:      a.Password,
		IdentityToken: a.IdentityToken,
		RegistryToken: a.RegistryToken,
	}
	if a.Auth != "" && cfg.Username == "" && cfg.Password == "" {
		dec, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil {
			return cfg, fmt.Errorf("auth is not base64: %w", err)
		}
		user, pass, ok := strings.Cut(string(dec), ":")
		if !ok {
			return cfg, fmt.Errorf("auth is not user:password")
		}
		cfg.Username, cfg.Password = user, pass
	}
	return cfg, nil
}

type credEntry struct {
	host string // lowercase host[:port], labels may be globs
	path string // repository path prefix, "" for the whole registry
	auth authn.AuthConfig
}

type secretsKeychain struct {
	entries []credEntry
}

// Resolve implements authn.Keychain.
func (k *secretsKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	registry := strings.ToLower(res.RegistryStr())
	if registry == "docker.io" || registry == "registry-1.docker.io" {
		registry = "index.docker.io"
	}
	repo := strings.TrimPrefix(strings.TrimPrefix(res.String(), res.RegistryStr()), "/")
	best, bestLen := -1, -1
	for i, e := range k.entries {
		if !hostMatches(e.host, registry) || !pathMatches(e.path, repo) {
			continue
		}
		if len(e.path) > bestLen {
			best, bestLen = i, len(e.path)
		}
	}
	if best < 0 {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(k.entries[best].auth), nil
}

// parseRegistryKey splits a docker config key ("https://host:port/path/")
// into a lowercase host[:port] and a path.
func parseRegistryKey(key string) (host, p string) {
	key = strings.TrimSpace(key)
	if i := strings.Index(key, "://"); i >= 0 {
		key = key[i+3:]
	}
	key = strings.TrimRight(key, "/")
	host, p, _ = strings.Cut(key, "/")
	host = strings.ToLower(host)
	switch host {
	case "index.docker.io", "docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		host = "index.docker.io"
		if p == "v1" || p == "v2" {
			p = ""
		}
	}
	return host, p
}

// hostMatches matches a registry host[:port] against a key whose DNS labels
// may be globs; ports must be equal.
func hostMatches(pattern, host string) bool {
	ph, pp := splitPort(pattern)
	hh, hp := splitPort(host)
	if pp != hp {
		return false
	}
	pl, hl := strings.Split(ph, "."), strings.Split(hh, ".")
	if len(pl) != len(hl) {
		return false
	}
	for i := range pl {
		if ok, err := path.Match(pl[i], hl[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

func splitPort(hostport string) (host, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	return hostport, ""
}

// pathMatches reports whether prefix is a path prefix of repo, component-wise.
func pathMatches(prefix, repo string) bool {
	return prefix == "" || repo == prefix || strings.HasPrefix(repo, prefix+"/")
}
