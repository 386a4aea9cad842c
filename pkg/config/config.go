// Package config loads knbox's configuration: its own settings and Knative's
// ConfigMaps (same names, keys and defaults as on a cluster) from one YAML
// file, and parses the ConfigMaps with Knative's own parsers so that knbox
// and a cluster read them alike. It must not import other knbox packages.
package config

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/pkg/configmap"
	tracingconfig "knative.dev/pkg/tracing/config"
	servingcfg "knative.dev/serving/pkg/apis/config"
	ascfg "knative.dev/serving/pkg/autoscaler/config"
	"knative.dev/serving/pkg/autoscaler/config/autoscalerconfig"
	"knative.dev/serving/pkg/deployment"
	gcconfig "knative.dev/serving/pkg/gc"
	routecfg "knative.dev/serving/pkg/reconciler/route/config"
	"sigs.k8s.io/yaml"
)

// Defaults of knbox's own settings.
const (
	DefaultAPIAddr  = "127.0.0.1:6443"
	DefaultHTTPAddr = "127.0.0.1:8080"
	DefaultDataDir  = "/var/lib/knbox"
	// DefaultMaxRequestBodyBytes is kube-apiserver's default limit.
	DefaultMaxRequestBodyBytes int64 = 3 << 20
)

// Knative ConfigMap names knbox reads, as on a cluster.
const (
	FeaturesName   = servingcfg.FeaturesConfigName // "config-features"
	DefaultsName   = servingcfg.DefaultsConfigName // "config-defaults"
	AutoscalerName = ascfg.ConfigName              // "config-autoscaler"
	NetworkName    = netcfg.ConfigMapName          // "config-network"
	DomainName     = routecfg.DomainConfigName     // "config-domain"
	GCName         = gcconfig.ConfigName           // "config-gc"
	DeploymentName = deployment.ConfigName         // "config-deployment"
	TracingName    = "config-tracing"              // knative.dev/pkg/tracing/config's
)

// knbox's deviations from Knative's defaults. Each applies only when the key
// is absent from the user's ConfigMap, so the user can still set it.
const (
	// RuntimeClassNameFeature is on by default: RuntimeClasses are how knbox
	// picks an OCI runtime (runc, runsc, ...) per Revision, which is the point
	// of running on one machine with sandboxes. Knative: "Disabled".
	RuntimeClassNameFeature = "kubernetes.podspec-runtimeclassname"

	// DefaultDomain is the domain of Routes when config-domain has no entry
	// without a selector, so that http://hello.default.localhost:8080 works
	// without DNS (names under localhost resolve to loopback). Knative:
	// "svc.cluster.local".
	DefaultDomain = "localhost"

	// QueueSidecarImageUnused fills config-deployment's queue-sidecar-image,
	// which Knative requires: knbox has no queue-proxy sidecar (its router
	// does that job), so the value is never used.
	QueueSidecarImageUnused = "knbox.invalid/no-queue-proxy"
)

// Config is knbox's configuration.
type Config struct {
	// APIAddr is the host:port of the Kubernetes-style API (HTTPS).
	APIAddr string `json:"apiAddr,omitempty"`
	// HTTPAddr is the host:port where the router serves Knative Services.
	HTTPAddr string `json:"httpAddr,omitempty"`
	// HTTPSAddr, with HTTPSCertFile and HTTPSKeyFile (PEM), also serves
	// Knative Services over HTTPS; empty: HTTP only.
	HTTPSAddr     string `json:"httpsAddr,omitempty"`
	HTTPSCertFile string `json:"httpsCertFile,omitempty"`
	HTTPSKeyFile  string `json:"httpsKeyFile,omitempty"`
	// InsecureRegistries (host or host:port) may be reached over plain
	// HTTP; registries on loopback always may, all others need HTTPS.
	InsecureRegistries []string `json:"insecureRegistries,omitempty"`
	// DataDir holds the store, the credentials, images and instances.
	DataDir string `json:"dataDir,omitempty"`
	// TokenAuthFile is an optional static token file in kube-apiserver's
	// --token-auth-file CSV format, beside the admin token.
	TokenAuthFile string `json:"tokenAuthFile,omitempty"`
	// APIHosts are extra DNS names or IP addresses for the API serving
	// certificate (localhost, 127.0.0.1 and ::1 are always there).
	APIHosts []string `json:"apiHosts,omitempty"`
	// MaxRequestBodyBytes limits API request bodies, as kube-apiserver does.
	MaxRequestBodyBytes int64 `json:"maxRequestBodyBytes,omitempty"`
	// ConfigMaps maps a Knative ConfigMap name (config-features,
	// config-defaults, config-autoscaler, config-network, config-domain,
	// config-gc, config-deployment) to its data. Absent ConfigMaps and keys
	// take Knative's defaults, but for knbox's deviations above.
	ConfigMaps map[string]map[string]string `json:"configMaps,omitempty"`
	// Runtimes maps handler names to OCI runtimes (see Runtime); built in:
	// runc, runsc, crun and process.
	Runtimes map[string]Runtime `json:"runtimes,omitempty"`
	// DefaultRuntimeClass is used by revisions that name no RuntimeClass.
	DefaultRuntimeClass string `json:"defaultRuntimeClass,omitempty"`
	// Egress gives instances outbound network (off by default).
	Egress Egress `json:"egress,omitempty"`
	// Policy is the operator's container policy (see Policy).
	Policy Policy `json:"policy,omitempty"`
	// Limits bound what clients, tenants and images may cost the host.
	Limits Limits `json:"limits,omitempty"`
	// ServiceAccounts configures ServiceAccount tokens.
	ServiceAccounts ServiceAccounts `json:"serviceAccounts,omitempty"`
	// Restart says what a restart of knbox keeps (see restart.go).
	Restart Restart `json:"restart,omitempty"`
	// PodSecurity is Pod Security admission's server-wide configuration
	// (pkg/config/tenants.go).
	PodSecurity PodSecurity `json:"podSecurity,omitempty"`
	// RuntimeClasses says which RuntimeClasses namespaces may use.
	RuntimeClasses RuntimeClasses `json:"runtimeClasses,omitempty"`
	// Observability configures /metrics and the access log
	// (observability.go).
	Observability Observability `json:"observability,omitempty"`
	// ClusterDomain is the cluster domain (Kubernetes' --cluster-domain,
	// Knative's CLUSTER_DOMAIN): Routes' cluster-local addresses are
	// name.namespace.svc.<ClusterDomain> and instances' search path ends
	// with it. Default DefaultClusterDomain. Read at start.
	ClusterDomain string `json:"clusterDomain,omitempty"`
	// Builds configures build.knative.dev Builds (builds.go).
	Builds Builds `json:"builds,omitempty"`
	// Registry configures the embedded OCI registry (registry.go).
	Registry Registry `json:"registry,omitempty"`
}

// DefaultClusterDomain is Kubernetes' and Knative's cluster domain.
const DefaultClusterDomain = "cluster.local"

// Default returns the configuration used when there is no file.
func Default() *Config {
	c := &Config{}
	c.applyDefaults()
	return c
}

// Load reads the YAML file at path, applies defaults for unset fields and
// validates the result. Unknown fields are errors, so typos do not pass
// silently. path "" returns Default().
func Load(path string) (*Config, error) {
	if path == "" {
		return Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// parse decodes, defaults and validates a configuration file's content.
func parse(b []byte) (*Config, error) {
	var f fileConfig
	if len(bytes.TrimSpace(b)) > 0 {
		if err := yaml.UnmarshalStrict(b, &f); err != nil {
			return nil, cleanYAMLError(err)
		}
	}
	c := &Config{
		APIAddr:             f.APIAddr,
		HTTPAddr:            f.HTTPAddr,
		HTTPSAddr:           f.HTTPSAddr,
		HTTPSCertFile:       f.HTTPSCertFile,
		HTTPSKeyFile:        f.HTTPSKeyFile,
		InsecureRegistries:  f.InsecureRegistries,
		DataDir:             f.DataDir,
		TokenAuthFile:       f.TokenAuthFile,
		APIHosts:            f.APIHosts,
		MaxRequestBodyBytes: f.MaxRequestBodyBytes,
		Runtimes:            f.Runtimes,
		DefaultRuntimeClass: f.DefaultRuntimeClass,
		Egress:              f.Egress,
		Policy:              f.Policy,
		Limits:              f.Limits,
		ServiceAccounts:     f.ServiceAccounts,
		PodSecurity:         f.PodSecurity,
		RuntimeClasses:      f.RuntimeClasses,
		Restart:             f.Restart,
		Observability:       f.Observability,
		ClusterDomain:       f.ClusterDomain,
		Builds:              f.Builds,
		Registry:            f.Registry,
	}
	if f.ConfigMaps != nil {
		c.ConfigMaps = make(map[string]map[string]string, len(f.ConfigMaps))
		for _, name := range slices.Sorted(maps.Keys(f.ConfigMaps)) {
			data := f.ConfigMaps[name]
			m := make(map[string]string, len(data))
			for _, k := range slices.Sorted(maps.Keys(data)) {
				v, err := scalarText(data[k])
				if err != nil {
					return nil, fmt.Errorf("configMaps.%s.%s: %w", name, k, err)
				}
				m[k] = v
			}
			c.ConfigMaps[name] = m
		}
	}
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := c.Policy.load(); err != nil {
		return nil, err
	}
	return c, nil
}

// fileConfig is Config as written in the file.
type fileConfig struct {
	APIAddr             string                                `json:"apiAddr"`
	HTTPAddr            string                                `json:"httpAddr"`
	HTTPSAddr           string                                `json:"httpsAddr"`
	HTTPSCertFile       string                                `json:"httpsCertFile"`
	HTTPSKeyFile        string                                `json:"httpsKeyFile"`
	InsecureRegistries  []string                              `json:"insecureRegistries"`
	DataDir             string                                `json:"dataDir"`
	TokenAuthFile       string                                `json:"tokenAuthFile"`
	APIHosts            []string                              `json:"apiHosts"`
	MaxRequestBodyBytes int64                                 `json:"maxRequestBodyBytes"`
	ConfigMaps          map[string]map[string]json.RawMessage `json:"configMaps"`
	Runtimes            map[string]Runtime                    `json:"runtimes"`
	DefaultRuntimeClass string                                `json:"defaultRuntimeClass"`
	Egress              Egress                                `json:"egress"`
	Policy              Policy                                `json:"policy"`
	Limits              Limits                                `json:"limits"`
	ServiceAccounts     ServiceAccounts                       `json:"serviceAccounts"`
	PodSecurity         PodSecurity                           `json:"podSecurity"`
	RuntimeClasses      RuntimeClasses                        `json:"runtimeClasses"`
	Restart             Restart                               `json:"restart"`
	Observability       Observability                         `json:"observability"`
	ClusterDomain       string                                `json:"clusterDomain"`
	Builds              Builds                                `json:"builds"`
	Registry            Registry                              `json:"registry"`
}

// scalarText returns a ConfigMap value: a string, or a number or boolean
// taken as its text (ConfigMaps on a cluster must quote them; a file need
// not). null is the empty string.
func scalarText(raw json.RawMessage) (string, error) {
	b := bytes.TrimSpace(raw)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		return "", nil
	case b[0] == '"':
		var s string
		err := json.Unmarshal(b, &s)
		return s, err
	case b[0] == '{' || b[0] == '[':
		return "", errors.New("must be a string, number or boolean, not a list or map")
	default:
		return string(b), nil
	}
}

// cleanYAMLError drops the JSON-decoding prefixes that sigs.k8s.io/yaml puts
// before the field name, which mean nothing to someone editing YAML.
func cleanYAMLError(err error) error {
	msg := err.Error()
	for _, p := range []string{"error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	msg = strings.Replace(msg, "Go struct field fileConfig.", "field ", 1)
	return errors.New(msg)
}

func (c *Config) applyDefaults() {
	c.Observability.applyDefaults()
	c.Builds.applyDefaults()
	if c.APIAddr == "" {
		c.APIAddr = DefaultAPIAddr
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.MaxRequestBodyBytes == 0 {
		c.MaxRequestBodyBytes = DefaultMaxRequestBodyBytes
	}
	if c.ConfigMaps == nil {
		c.ConfigMaps = map[string]map[string]string{}
	}
	if c.ClusterDomain == "" {
		c.ClusterDomain = DefaultClusterDomain
	}
	c.applyRuntimeDefaults()
	c.Egress.applyDefaults()
	c.Limits.applyDefaults()
	c.Registry.applyDefaults()
}

// parsers validate each known ConfigMap with Knative's parser.
var parsers = map[string]func(c *Config) error{
	FeaturesName:   func(c *Config) error { _, err := c.features(); return err },
	DefaultsName:   func(c *Config) error { _, err := c.defaults(); return err },
	AutoscalerName: func(c *Config) error { _, err := c.autoscaler(); return err },
	NetworkName:    func(c *Config) error { _, err := c.Network(); return err },
	DomainName:     func(c *Config) error { _, err := c.Domain(); return err },
	GCName:         func(c *Config) error { _, err := c.GC(); return err },
	DeploymentName: func(c *Config) error { _, err := c.Deployment(); return err },
	TracingName:    func(c *Config) error { _, err := c.Tracing(); return err },
}

// Tracing is config-tracing as Knative reads it (backend none or zipkin,
// zipkin-endpoint, sample-rate, debug): where the data plane's
// OpenTelemetry spans go. Absent: no tracing.
func (c *Config) Tracing() (*tracingconfig.Config, error) {
	t, err := tracingconfig.NewTracingConfigFromMap(c.data(TracingName))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", TracingName, err)
	}
	if t.SampleRate < 0 || t.SampleRate > 1 {
		return nil, fmt.Errorf("%s: sample-rate: must be between 0 and 1, was %v", TracingName, t.SampleRate)
	}
	if t.Backend == tracingconfig.Zipkin {
		u, err := url.Parse(t.ZipkinEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s: zipkin-endpoint: %q is not an http(s) URL", TracingName, t.ZipkinEndpoint)
		}
	}
	return t, nil
}

// ConfigMapNames lists the Knative ConfigMaps that knbox reads, sorted.
func ConfigMapNames() []string {
	names := make([]string, 0, len(parsers))
	for n := range parsers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Validate checks c as Load does; call it again after changing a loaded
// Config (from command-line flags, say).
func (c *Config) Validate() error {
	if err := validateAddr("apiAddr", c.APIAddr); err != nil {
		return err
	}
	if _, err := c.HandoverWait(); err != nil {
		return err
	}
	if err := validateAddr("httpAddr", c.HTTPAddr); err != nil {
		return err
	}
	if c.HTTPSAddr != "" {
		if err := validateAddr("httpsAddr", c.HTTPSAddr); err != nil {
			return err
		}
		if c.HTTPSCertFile == "" || c.HTTPSKeyFile == "" {
			return errors.New("httpsAddr: needs httpsCertFile and httpsKeyFile")
		}
	} else if c.HTTPSCertFile != "" || c.HTTPSKeyFile != "" {
		return errors.New("httpsCertFile, httpsKeyFile: set httpsAddr too")
	}
	if c.DataDir == "" {
		return errors.New("dataDir: must not be empty")
	}
	if errs := validation.IsDNS1123Subdomain(c.ClusterDomain); len(errs) > 0 {
		return fmt.Errorf("clusterDomain: %q: %s", c.ClusterDomain, strings.Join(errs, "; "))
	}
	if c.MaxRequestBodyBytes <= 0 {
		return fmt.Errorf("maxRequestBodyBytes: must be positive, was %d", c.MaxRequestBodyBytes)
	}
	for i, r := range c.InsecureRegistries {
		host := r
		if h, _, err := net.SplitHostPort(r); err == nil {
			host = h
		}
		if strings.Contains(r, "/") || validateHost(host) != nil {
			return fmt.Errorf("insecureRegistries[%d]: %q is not a registry host or host:port", i, r)
		}
	}
	for i, h := range c.APIHosts {
		if err := validateHost(h); err != nil {
			return fmt.Errorf("apiHosts[%d]: %w", i, err)
		}
	}
	if err := c.validateRuntimes(); err != nil {
		return err
	}
	if err := c.ServiceAccounts.validate(); err != nil {
		return err
	}
	if err := c.Egress.validate(); err != nil {
		return err
	}
	if err := c.Policy.validate(); err != nil {
		return err
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	if err := c.validateTenants(); err != nil {
		return err
	}
	if err := c.Observability.validate(); err != nil {
		return err
	}
	if err := c.Builds.validate(); err != nil {
		return err
	}
	if err := c.Registry.validate(); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(c.ConfigMaps)) {
		if _, ok := parsers[name]; !ok {
			return fmt.Errorf("configMaps: unknown ConfigMap %q (knbox reads %s)", name, strings.Join(ConfigMapNames(), ", "))
		}
	}
	for _, name := range ConfigMapNames() {
		if err := parsers[name](c); err != nil {
			return fmt.Errorf("configMaps: %w", err)
		}
		if err := checkKeys(name, c.data(name)); err != nil {
			return fmt.Errorf("configMaps: %w", err)
		}
	}
	return nil
}

func validateAddr(field, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %q is not host:port: %w", field, addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s: %q: port %q is not a number from 0 to 65535", field, addr, port)
	}
	return nil
}

func validateHost(h string) error {
	if net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")) != nil {
		return nil
	}
	name := strings.ToLower(strings.TrimSuffix(h, "."))
	errs := validation.IsDNS1123Subdomain(name)
	if len(errs) == 0 || len(validation.IsWildcardDNS1123Subdomain(name)) == 0 {
		return nil
	}
	return fmt.Errorf("%q is neither an IP address nor a DNS name: %s", h, strings.Join(errs, "; "))
}

// data returns a ConfigMap's data (nil when absent).
func (c *Config) data(name string) map[string]string { return c.ConfigMaps[name] }

// Serving returns the Knative configs that admission (defaulting and
// validation) reads from the context: config-defaults, config-features and
// config-autoscaler.
func (c *Config) Serving() (*servingcfg.Config, error) {
	defaults, err := c.defaults()
	if err != nil {
		return nil, err
	}
	features, err := c.features()
	if err != nil {
		return nil, err
	}
	as, err := c.autoscaler()
	if err != nil {
		return nil, err
	}
	return &servingcfg.Config{Defaults: defaults, Features: features, Autoscaler: as}, nil
}

func (c *Config) defaults() (*servingcfg.Defaults, error) {
	d, err := servingcfg.NewDefaultsConfigFromMap(c.data(DefaultsName))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DefaultsName, err)
	}
	return d, nil
}

func (c *Config) autoscaler() (*autoscalerconfig.Config, error) {
	a, err := ascfg.NewConfigFromMap(c.data(AutoscalerName))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", AutoscalerName, err)
	}
	return a, nil
}

// features parses config-features with knbox's deviation. Knative ignores
// a value that is not enabled, allowed or disabled, and a key it does not
// know, so a typo silently leaves a feature off; knbox rejects both.
func (c *Config) features() (*servingcfg.Features, error) {
	user := c.data(FeaturesName)
	for _, k := range slices.Sorted(maps.Keys(user)) {
		if k == configmap.ExampleKey {
			continue
		}
		if !knownFeature(k) {
			return nil, fmt.Errorf("%s: unknown feature %q", FeaturesName, k)
		}
		switch v := user[k]; {
		case strings.EqualFold(v, string(servingcfg.Enabled)),
			strings.EqualFold(v, string(servingcfg.Allowed)),
			strings.EqualFold(v, string(servingcfg.Disabled)):
		default:
			return nil, fmt.Errorf("%s: %s: invalid value %q: want enabled, allowed or disabled", FeaturesName, k, v)
		}
	}
	data := make(map[string]string, len(user)+2)
	data[RuntimeClassNameFeature] = "enabled"
	if c.Policy.appliesSecureDefaults() {
		data[SecurePodDefaultsFeature] = "enabled"
	}
	for k, v := range user {
		data[k] = v
	}
	f, err := servingcfg.NewFeaturesConfigFromMap(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", FeaturesName, err)
	}
	return f, nil
}

// knownFeature tells whether Knative's parser reads key: setting it to
// enabled or to disabled must make a difference.
func knownFeature(key string) bool {
	on, err1 := servingcfg.NewFeaturesConfigFromMap(map[string]string{key: "enabled"})
	off, err2 := servingcfg.NewFeaturesConfigFromMap(map[string]string{key: "disabled"})
	return err1 == nil && err2 == nil && *on != *off
}

// GC returns config-gc, parsed by Knative.
func (c *Config) GC() (*gcconfig.Config, error) {
	g, err := gcconfig.NewConfigFromConfigMapFunc(context.Background())(c.configMap(GCName))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", GCName, err)
	}
	return g, nil
}

// Network returns config-network, parsed by Knative: domain-template and
// tag-template have Knative's defaults. The domain itself is in Domain.
func (c *Config) Network() (*netcfg.Config, error) {
	n, err := netcfg.NewConfigFromMap(c.data(NetworkName))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", NetworkName, err)
	}
	return n, nil
}

// Domain returns config-domain, parsed by Knative, with knbox's deviation:
// without an entry that has no selector, the default domain is "localhost"
// rather than Knative's "svc.cluster.local".
func (c *Config) Domain() (*routecfg.Domain, error) { return ParseDomain(c.data(DomainName)) }

// ParseDomain parses config-domain's data as Domain does (the
// knative-serving/config-domain ConfigMap's, which replaces the file's).
func ParseDomain(user map[string]string) (*routecfg.Domain, error) {
	d, err := routecfg.NewDomainFromConfigMap(&corev1.ConfigMap{Data: user})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DomainName, err)
	}
	// Knative adds its cluster default when no entry is a default. Replace
	// it, unless the user named that domain or gave localhost a selector.
	_, given := user[routecfg.DefaultDomain]
	dc, added := d.Domains[routecfg.DefaultDomain]
	_, taken := d.Domains[DefaultDomain]
	if added && !given && !taken {
		delete(d.Domains, routecfg.DefaultDomain)
		d.Domains[DefaultDomain] = dc
	}
	return d, nil
}

// Deployment returns config-deployment, parsed by Knative. knbox honours
// progress-deadline, digest-resolution-timeout and
// registries-skipping-tag-resolving; Load refuses the other keys unless
// they have Knative's default (see keys.go). queue-sidecar-image, which
// Knative requires, defaults to QueueSidecarImageUnused.
func (c *Config) Deployment() (*deployment.Config, error) {
	d, err := parseDeployment(c.data(DeploymentName))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DeploymentName, err)
	}
	return d, nil
}

func (c *Config) configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{Data: c.data(name)}
}
