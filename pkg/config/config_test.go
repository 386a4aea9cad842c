package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	netcfg "knative.dev/networking/pkg/config"
	servingcfg "knative.dev/serving/pkg/apis/config"
	ascfg "knative.dev/serving/pkg/autoscaler/config"
	"knative.dev/serving/pkg/deployment"
	gcconfig "knative.dev/serving/pkg/gc"
	routecfg "knative.dev/serving/pkg/reconciler/route/config"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "knbox.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustParse(t *testing.T, content string) *Config {
	t.Helper()
	c, err := parse([]byte(content))
	if err != nil {
		t.Fatalf("parse:\n%s\nerror: %v", content, err)
	}
	return c
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	yes := true
	want := &Config{
		APIAddr:             "127.0.0.1:6443",
		HTTPAddr:            "127.0.0.1:8080",
		DataDir:             "/var/lib/knbox",
		MaxRequestBodyBytes: 3 * 1024 * 1024,
		ConfigMaps:          map[string]map[string]string{},
		Runtimes: map[string]Runtime{
			"runc":    {Type: "oci", Binary: "runc"},
			"runsc":   {Type: "oci", Binary: "runsc", Args: []string{"--network=host", "--host-uds=open", "--oci-seccomp"}, ManageCgroups: &yes, SandboxENOSYS: &yes},
			"crun":    {Type: "oci", Binary: "crun"},
			"process": {Type: "process"},
		},
		DefaultRuntimeClass: "runc",
		Egress:              Egress{Subnet: "10.89.0.0/16", Bridge: "knbox0", CNIPluginDirs: []string{"/usr/lib/cni", "/opt/cni/bin"}},
		Limits: Limits{
			API: APILimits{MaxConnections: 1000, ReadHeaderTimeout: Duration(32 * time.Second), IdleTimeout: Duration(90 * time.Second),
				MaxRequestsInFlight: 400, MaxMutatingRequestsInFlight: 200, MaxLongRunningRequests: 1000,
				RequestTimeout: Duration(time.Minute), StreamIdleTimeout: Duration(4 * time.Hour),
				StreamCreationTimeout: Duration(30 * time.Second), MaxObjectBytes: 1536 << 10},
			Router: ServerLimits{MaxConnections: 10000, ReadHeaderTimeout: Duration(10 * time.Second), IdleTimeout: Duration(90 * time.Second)},
			Store:  StoreLimits{EventLogSize: 10000, EventLogBytes: 4 << 20, CacheBytes: 1 << 20, WatchBufferBytes: 16 << 20},
			Disk:   DiskLimits{MinFreeBytes: 256 << 20, ReserveBytes: 64 << 20},
			Images: ImageLimits{MaxLayerBytes: 4 << 30, MaxImageBytes: 8 << 30, MaxLayerFiles: 250000, MaxImageFiles: 500000, MaxLayers: 127,
				MaxConfigBytes: 8 << 20, MaxManifestBytes: 4 << 20, PullBackoff: Duration(10 * time.Second), MaxPullBackoff: Duration(5 * time.Minute)},
			Events:            EventLimits{TTL: Duration(time.Hour), MaxPerNamespace: 1000},
			EphemeralStorage:  EphemeralStorageLimits{Interval: Duration(10 * time.Second), MaxFiles: 500000, MaxDepth: 256},
			InstanceDNS:       DNSLimits{MaxForwarding: 256, ForwardTimeout: Duration(2 * time.Second)},
			InstanceAPI:       InstanceAPILimits{MaxConnections: 32},
			Memory:            MemoryLimits{GCPercent: 50, Rest: MemoryRestLimits{After: Duration(30 * time.Second), GCPercent: 10, QuietBytesPerSecond: 1 << 20}},
			PreparedSandboxes: PreparedSandboxLimits{Count: 16, Memory: 256 << 20},
			IdleShims:         IdleShimLimits{Count: 9, KeepFor: Duration(10 * time.Minute)},
		},
		Observability: Observability{QueueLength: DefaultObserverQueueLength, LogFormat: "text", Console: Console{
			MaxSessions: DefaultConsoleMaxSessions, SessionTTL: DefaultConsoleSessionTTL,
			SampleInterval: DefaultConsoleSampleInterval, Samples: DefaultConsoleSamples}},
		ClusterDomain: "cluster.local",
		Builds: Builds{DefaultTimeout: DefaultBuildTimeout, MaxTimeout: DefaultMaxBuildTimeout, MaxUploadBytes: DefaultMaxBuildUploadBytes,
			MaxSourceBytes: DefaultMaxBuildSourceBytes, MaxSourceFiles: DefaultMaxBuildSourceFiles,
			GitTimeout: DefaultBuildGitTimeout, MaxGitFetchBytes: DefaultMaxBuildGitFetchBytes},
		Registry: Registry{Addr: DefaultRegistryAddr, Names: []string{DefaultRegistryName}, MaxBlobBytes: DefaultRegistryMaxBlobBytes,
			MaxManifestBytes: DefaultRegistryMaxManifest, MaxUploads: DefaultRegistryMaxUploads,
			UploadTTL: Duration(DefaultRegistryUploadTTL), BlobGrace: Duration(DefaultRegistryBlobGrace)},
	}
	if got := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("Default() = %+v, want %+v", got, want)
	}
	for name, content := range map[string]string{"empty": "", "comments only": "# nothing\n", "empty map": "{}\n"} {
		c := mustParse(t, content)
		if !reflect.DeepEqual(c, want) {
			t.Errorf("%s file: %+v, want %+v", name, c, want)
		}
	}
	c, err := Load("")
	if err != nil || !reflect.DeepEqual(c, want) {
		t.Errorf(`Load("") = %+v, %v`, c, err)
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("Default() does not validate: %v", err)
	}
}

// TestKnativeDefaults: with no ConfigMaps, every parsed config is Knative's
// default but for knbox's documented deviations.
func TestKnativeDefaults(t *testing.T) {
	t.Parallel()
	c := Default()
	s, err := c.Serving()
	if err != nil {
		t.Fatal(err)
	}

	wantFeatures, _ := servingcfg.NewFeaturesConfigFromMap(nil)
	if wantFeatures.PodSpecRuntimeClassName != servingcfg.Disabled {
		t.Fatalf("Knative's runtimeClassName default changed to %q: revisit the deviation", wantFeatures.PodSpecRuntimeClassName)
	}
	wantFeatures.PodSpecRuntimeClassName = servingcfg.Enabled // the deviation
	if !reflect.DeepEqual(s.Features, wantFeatures) {
		t.Errorf("features = %+v\nwant %+v", s.Features, wantFeatures)
	}
	wantDefaults, _ := servingcfg.NewDefaultsConfigFromMap(nil)
	if !reflect.DeepEqual(s.Defaults, wantDefaults) {
		t.Errorf("defaults = %+v\nwant %+v", s.Defaults, wantDefaults)
	}
	wantAS, _ := ascfg.NewConfigFromMap(nil)
	if !reflect.DeepEqual(s.Autoscaler, wantAS) {
		t.Errorf("autoscaler = %+v\nwant %+v", s.Autoscaler, wantAS)
	}

	gc, err := c.GC()
	if err != nil {
		t.Fatal(err)
	}
	wantGC, _ := gcconfig.NewConfigFromConfigMapFunc(context.Background())(&corev1.ConfigMap{})
	if !reflect.DeepEqual(gc, wantGC) {
		t.Errorf("gc = %+v, want %+v", gc, wantGC)
	}

	n, err := c.Network()
	if err != nil {
		t.Fatal(err)
	}
	if n.DomainTemplate != netcfg.DefaultDomainTemplate || n.TagTemplate != netcfg.DefaultTagTemplate {
		t.Errorf("network templates %q %q", n.DomainTemplate, n.TagTemplate)
	}

	d, err := c.Domain()
	if err != nil {
		t.Fatal(err)
	}
	if got := d.LookupDomainForLabels(map[string]string{"app": "x"}); got != "localhost" {
		t.Errorf("default domain = %q, want localhost", got)
	}
	if len(d.Domains) != 1 {
		t.Errorf("domains = %v, want localhost only", d.Domains)
	}

	dep, err := c.Deployment()
	if err != nil {
		t.Fatal(err)
	}
	if dep.ProgressDeadline != deployment.ProgressDeadlineDefault || dep.QueueSidecarImage != QueueSidecarImageUnused {
		t.Errorf("deployment = %+v", dep)
	}
}

func TestRuntimeClassNameFeature(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value string // "" = key absent
		want  servingcfg.Flag
	}{
		{"", servingcfg.Enabled},
		{"enabled", servingcfg.Enabled},
		{"disabled", servingcfg.Disabled},
		{"Disabled", servingcfg.Disabled},
		{"allowed", servingcfg.Allowed},
	}
	for _, tt := range tests {
		t.Run("value="+tt.value, func(t *testing.T) {
			t.Parallel()
			content := "configMaps:\n  config-features:\n    tag-header-based-routing: enabled\n"
			if tt.value != "" {
				content += "    kubernetes.podspec-runtimeclassname: " + tt.value + "\n"
			}
			s, err := mustParse(t, content).Serving()
			if err != nil {
				t.Fatal(err)
			}
			if s.Features.PodSpecRuntimeClassName != tt.want {
				t.Errorf("runtimeClassName = %q, want %q", s.Features.PodSpecRuntimeClassName, tt.want)
			}
		})
	}
}

func TestLoadExampleFile(t *testing.T) {
	t.Parallel()
	c, err := Load(filepath.Join("..", "..", "docs", "knbox.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.APIAddr != DefaultAPIAddr || c.HTTPAddr != DefaultHTTPAddr || c.DataDir != DefaultDataDir ||
		!reflect.DeepEqual(c.APIHosts, []string{"knbox.localhost"}) {
		t.Errorf("loaded %+v", c)
	}
	if !reflect.DeepEqual(c.Limits, Default().Limits) {
		t.Errorf("the example's limits are not the defaults:\n%+v\nwant\n%+v", c.Limits, Default().Limits)
	}
	if got := c.ConfigMaps["config-autoscaler"]["enable-scale-to-zero"]; got != "true" {
		t.Errorf("unquoted boolean became %q", got)
	}
	s, err := c.Serving()
	if err != nil {
		t.Fatal(err)
	}
	if s.Features.PodSpecRuntimeClassName != servingcfg.Enabled || s.Autoscaler.StableWindow != time.Minute {
		t.Errorf("serving config %+v %+v", s.Features, s.Autoscaler)
	}
	d, err := c.Domain()
	if err != nil {
		t.Fatal(err)
	}
	if got := d.LookupDomainForLabels(nil); got != "localhost" {
		t.Errorf("domain = %q", got)
	}
}

func TestLoadFullFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `
apiAddr: "[::1]:7443"
httpAddr: 0.0.0.0:80
dataDir: /srv/knbox
tokenAuthFile: /etc/knbox/tokens.csv
apiHosts: [box.example.com, 192.0.2.7, "*.apps.example.com"]
maxRequestBodyBytes: 1048576
egress:
  enabled: true
  subnet: 172.30.0.0/24
  bridge: kbx1
  nameservers: [192.0.2.53]
configMaps:
  config-features:
    kubernetes.podspec-runtimeclassname: disabled
    kubernetes.podspec-securitycontext: Enabled
  config-defaults:
    revision-timeout-seconds: "120"
    max-revision-timeout-seconds: 900
    container-concurrency: 10
  config-autoscaler:
    enable-scale-to-zero: false
    stable-window: 2m
    target-burst-capacity: -1
    container-concurrency-target-percentage: 50
  config-network:
    domain-template: "{{.Name}}-{{.Namespace}}.{{.Domain}}"
    rollout-duration: 0
  config-domain:
    example.com: ""
    internal.example.com: |
      selector:
        visibility: internal
  config-gc:
    min-non-active-revisions: 2
    max-non-active-revisions: disabled
    retain-since-create-time: disabled
  config-deployment:
    progress-deadline: 60s
    registries-skipping-tag-resolving: registry.local
`)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.APIAddr != "[::1]:7443" || c.HTTPAddr != "0.0.0.0:80" || c.DataDir != "/srv/knbox" ||
		c.TokenAuthFile != "/etc/knbox/tokens.csv" || c.MaxRequestBodyBytes != 1<<20 ||
		!reflect.DeepEqual(c.APIHosts, []string{"box.example.com", "192.0.2.7", "*.apps.example.com"}) {
		t.Errorf("settings: %+v", c)
	}
	if want := (Egress{Enabled: true, Subnet: "172.30.0.0/24", Bridge: "kbx1", CNIPluginDirs: DefaultCNIPluginDirs, Nameservers: []string{"192.0.2.53"}}); !reflect.DeepEqual(c.Egress, want) {
		t.Errorf("egress: %+v, want %+v", c.Egress, want)
	}
	if got := c.EgressSubnet().String(); got != "172.30.0.0/24" {
		t.Errorf("EgressSubnet() = %s", got)
	}
	s, err := c.Serving()
	if err != nil {
		t.Fatal(err)
	}
	if s.Features.PodSpecRuntimeClassName != servingcfg.Disabled || s.Features.PodSpecSecurityContext != servingcfg.Enabled {
		t.Errorf("features: %+v", s.Features)
	}
	if s.Defaults.RevisionTimeoutSeconds != 120 || s.Defaults.MaxRevisionTimeoutSeconds != 900 || s.Defaults.ContainerConcurrency != 10 {
		t.Errorf("defaults: %+v", s.Defaults)
	}
	if s.Autoscaler.EnableScaleToZero || s.Autoscaler.StableWindow != 2*time.Minute ||
		s.Autoscaler.TargetBurstCapacity != -1 || s.Autoscaler.ContainerConcurrencyTargetFraction != 0.5 {
		t.Errorf("autoscaler: %+v", s.Autoscaler)
	}
	n, err := c.Network()
	if err != nil {
		t.Fatal(err)
	}
	if n.DomainTemplate != "{{.Name}}-{{.Namespace}}.{{.Domain}}" || n.RolloutDurationSecs != 0 || n.TagTemplate != netcfg.DefaultTagTemplate {
		t.Errorf("network: %+v", n)
	}
	d, err := c.Domain()
	if err != nil {
		t.Fatal(err)
	}
	if got := d.LookupDomainForLabels(map[string]string{"visibility": "internal"}); got != "internal.example.com" {
		t.Errorf("selected domain = %q", got)
	}
	if got := d.LookupDomainForLabels(nil); got != "example.com" {
		t.Errorf("default domain = %q", got)
	}
	gc, err := c.GC()
	if err != nil {
		t.Fatal(err)
	}
	if gc.MinNonActiveRevisions != 2 || gc.MaxNonActiveRevisions != gcconfig.Disabled || gc.RetainSinceCreateTime != gcconfig.Disabled {
		t.Errorf("gc: %+v", gc)
	}
	dep, err := c.Deployment()
	if err != nil {
		t.Fatal(err)
	}
	if dep.ProgressDeadline != time.Minute || !dep.RegistriesSkippingTagResolving.Has("registry.local") {
		t.Errorf("deployment: %+v", dep)
	}
}

func TestDomainDeviation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		data   string
		labels map[string]string
		want   string
	}{
		{"selector only: localhost is the default", "    prod.example.com: |\n      selector:\n        env: prod\n", nil, "localhost"},
		{"selector still wins", "    prod.example.com: |\n      selector:\n        env: prod\n", map[string]string{"env": "prod"}, "prod.example.com"},
		{"Knative's cluster domain named by the user", "    " + routecfg.DefaultDomain + ": \"\"\n", nil, routecfg.DefaultDomain},
		{"user default", "    example.org: \"\"\n", nil, "example.org"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := mustParse(t, "configMaps:\n  config-domain:\n"+tt.data).Domain()
			if err != nil {
				t.Fatal(err)
			}
			if got := d.LookupDomainForLabels(tt.labels); got != tt.want {
				t.Errorf("domain = %q, want %q (domains %v)", got, tt.want, d.Domains)
			}
		})
	}
}

func TestLoadErrorsNameTheProblem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		want    []string
	}{
		{"unknown top-level key", "apiAdr: 127.0.0.1:1\n", []string{`unknown field "apiAdr"`}},
		{"unknown nested field", "runtimes:\n  runc:\n    bogus: 1\n", []string{`unknown field "bogus"`}},
		{"unknown ConfigMap", "configMaps:\n  config-featurs:\n    a: b\n", []string{`"config-featurs"`, "config-features"}},
		{"bad apiAddr", "apiAddr: localhost\n", []string{"apiAddr", `"localhost"`}},
		{"bad clusterDomain", "clusterDomain: Corp_Internal\n", []string{"clusterDomain", `"Corp_Internal"`}},
		{"bad httpAddr port", "httpAddr: 127.0.0.1:http\n", []string{"httpAddr", `"http"`}},
		{"port out of range", "httpAddr: 127.0.0.1:70000\n", []string{"httpAddr", `"70000"`}},
		{"negative body limit", "maxRequestBodyBytes: -1\n", []string{"maxRequestBodyBytes"}},
		{"negative idle shims", "limits:\n  idleShims:\n    count: -1\n", []string{"limits.idleShims.count"}},
		{"bad api host", "apiHosts: [ok.example, \"bad host\"]\n", []string{"apiHosts[1]", `"bad host"`}},
		{"wrong type", "apiHosts: box.example\n", []string{"field apiHosts"}},
		{"list as ConfigMap value", "configMaps:\n  config-gc:\n    min-non-active-revisions: [1]\n", []string{"configMaps.config-gc.min-non-active-revisions", "string, number or boolean"}},
		{"duplicate key", "dataDir: /a\ndataDir: /b\n", []string{"dataDir"}},
		{"not YAML", "apiAddr: [\n", []string{"yaml"}},
		{"unknown feature", "configMaps:\n  config-features:\n    kubernetes.podspec-runtimeclasname: enabled\n", []string{"config-features", `unknown feature "kubernetes.podspec-runtimeclasname"`}},
		{"egress subnet not a prefix", "egress:\n  enabled: true\n  subnet: 10.89.0.0\n", []string{"egress.subnet", `"10.89.0.0"`}},
		{"egress subnet IPv6", "egress:\n  subnet: fd00::/64\n", []string{"egress.subnet", "IPv4"}},
		{"egress subnet too small", "egress:\n  subnet: 10.89.0.0/31\n", []string{"egress.subnet", "/30"}},
		{"egress subnet host bits", "egress:\n  subnet: 10.89.0.1/16\n", []string{"egress.subnet", "10.89.0.0/16"}},
		{"egress subnet loopback", "egress:\n  subnet: 127.0.0.0/8\n", []string{"egress.subnet", "loopback"}},
		{"egress bridge too long", "egress:\n  bridge: a-bridge-name-too-long\n", []string{"egress.bridge"}},
		{"egress relative plugin dir", "egress:\n  cniPluginDirs: [cni]\n", []string{"egress.cniPluginDirs[0]"}},
		{"egress nameserver not an IP", "egress:\n  nameservers: [dns.example]\n", []string{"egress.nameservers[0]", `"dns.example"`}},
		{"egress nameserver on loopback", "egress:\n  nameservers: [192.0.2.53, 127.0.0.53]\n", []string{"egress.nameservers[1]", "loopback"}},
		{"egress unknown field", "egress:\n  enable: true\n", []string{`unknown field "enable"`}},
		{"issuer not https", "serviceAccounts:\n  issuer: http://x\n", []string{"serviceAccounts.issuer", "https"}},
		{"empty audience", "serviceAccounts:\n  apiAudiences: [a, \"\"]\n", []string{"serviceAccounts.apiAudiences[1]"}},
		{"token lifetime too short", "serviceAccounts:\n  maxTokenExpirationSeconds: 60\n", []string{"serviceAccounts.maxTokenExpirationSeconds", "600"}},
		{"serviceAccounts unknown field", "serviceAccounts:\n  issuers: x\n", []string{`unknown field "issuers"`}},
		{"bad feature value", "configMaps:\n  config-features:\n    tag-header-based-routing: yes-please\n", []string{"config-features", "tag-header-based-routing", `"yes-please"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, tt.content)
			_, err := Load(path)
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.content)
			}
			for _, w := range append(tt.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "none.yaml")
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("err = %v", err)
		}
	})
}

// TestKnativeErrorText: a bad value in a Knative ConfigMap fails Load with
// the error Knative's own parser gives, prefixed with the ConfigMap's name.
func TestKnativeErrorText(t *testing.T) {
	t.Parallel()
	gcParse := func(d map[string]string) error {
		_, err := gcconfig.NewConfigFromConfigMapFunc(context.Background())(&corev1.ConfigMap{Data: d})
		return err
	}
	tests := []struct {
		cm      string
		data    map[string]string
		knative func(map[string]string) error
	}{
		{"config-defaults", map[string]string{"revision-timeout-seconds": "900", "max-revision-timeout-seconds": "600"},
			func(d map[string]string) error { _, err := servingcfg.NewDefaultsConfigFromMap(d); return err }},
		{"config-defaults", map[string]string{"container-concurrency": "many"},
			func(d map[string]string) error { _, err := servingcfg.NewDefaultsConfigFromMap(d); return err }},
		{"config-autoscaler", map[string]string{"stable-window": "1s"},
			func(d map[string]string) error { _, err := ascfg.NewConfigFromMap(d); return err }},
		{"config-autoscaler", map[string]string{"max-scale-up-rate": "fast"},
			func(d map[string]string) error { _, err := ascfg.NewConfigFromMap(d); return err }},
		{"config-network", map[string]string{"domain-template": "{{.Name}}.{{.Namespace}}.{{.Domain}}/path"},
			func(d map[string]string) error { _, err := netcfg.NewConfigFromMap(d); return err }},
		{"config-network", map[string]string{"http-protocol": "sometimes"},
			func(d map[string]string) error { _, err := netcfg.NewConfigFromMap(d); return err }},
		{"config-gc", map[string]string{"min-non-active-revisions": "5", "max-non-active-revisions": "1"}, gcParse},
		{"config-gc", map[string]string{"retain-since-create-time": "soon"}, gcParse},
		{"config-domain", map[string]string{"example.com": "selector: [not, a, map]"},
			func(d map[string]string) error {
				_, err := routecfg.NewDomainFromConfigMap(&corev1.ConfigMap{Data: d})
				return err
			}},
		{"config-deployment", map[string]string{"queue-sidecar-image": "x", "progress-deadline": "-1s"},
			func(d map[string]string) error { _, err := deployment.NewConfigFromMap(d); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.cm, func(t *testing.T) {
			t.Parallel()
			kerr := tt.knative(tt.data)
			if kerr == nil {
				t.Fatalf("Knative accepts %v", tt.data)
			}
			var b strings.Builder
			b.WriteString("configMaps:\n  " + tt.cm + ":\n")
			for k, v := range tt.data {
				b.WriteString("    " + k + ": '" + v + "'\n")
			}
			_, err := parse([]byte(b.String()))
			if err == nil {
				t.Fatalf("accepted %v", tt.data)
			}
			if want := tt.cm + ": " + kerr.Error(); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q\nwant it to contain %q", err, want)
			}
		})
	}
}

// TestUnusedKeysRefused: a key that no parser reads (a typo) and a key that
// knbox does not honour, set to anything but Knative's default, fail Load
// with a message; the defaults of those keys, written out, load.
func TestUnusedKeysRefused(t *testing.T) {
	t.Parallel()
	refused := []struct{ cm, key, value, want string }{
		{"config-deployment", "runtime-class-name", "gvisor: {}", "defaultRuntimeClass"},
		{"config-deployment", "queue-sidecar-image", "gcr.io/knative-releases/queue:v1", "queue-proxy"},
		{"config-deployment", "queue-sidecar-memory-limit", "1Gi", "queue-proxy"},
		{"config-deployment", "default-affinity-type", "none", "one machine"},
		{"config-deployment", "progres-deadline", "10s", `unknown key "progres-deadline"`},
		{"config-network", "ingress-class", "kourier.ingress.networking.knative.dev", "not supported"},
		{"config-network", "rollout-duration", "30", "gradual rollout"},
		{"config-network", "http-protocol", "Redirected", "not supported"},
		{"config-autoscaler", "pod-autoscaler-class", "hpa.autoscaling.knative.dev", "KPA"},
		{"config-autoscaler", "target-burst-capacity", "0", "always in the request path"},
		{"config-autoscaler", "activator-capacity", "50", "activator"},
		{"config-autoscaler", "stable-windw", "60s", `unknown key "stable-windw"`},
		{"config-gc", "min-non-active-revision", "2", `unknown key "min-non-active-revision"`},
		{"config-defaults", "revision-timeout-second", "2", `unknown key "revision-timeout-second"`},
	}
	for _, tt := range refused {
		t.Run(tt.cm+"/"+tt.key, func(t *testing.T) {
			t.Parallel()
			_, err := parse([]byte(fmt.Sprintf("configMaps:\n  %s:\n    %s: %q\n", tt.cm, tt.key, tt.value)))
			if err == nil || !strings.Contains(err.Error(), tt.cm) || !strings.Contains(err.Error(), tt.key) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s %s=%q: %v; want an error naming it and %q", tt.cm, tt.key, tt.value, err, tt.want)
			}
		})
	}
	mustParse(t, `
configMaps:
  config-deployment:
    _example: "# documentation"
    queue-sidecar-image: ""
    default-affinity-type: prefer-spread-revision-over-nodes
    progress-deadline: 60s
    digest-resolution-timeout: 5s
    registries-skipping-tag-resolving: ko.local
  config-network:
    http-protocol: Enabled
    ingress-class: istio.ingress.networking.knative.dev
    domain-template: "{{.Name}}.{{.Namespace}}.{{.Domain}}"
  config-autoscaler:
    pod-autoscaler-class: kpa.autoscaling.knative.dev
    target-burst-capacity: -1
    activator-capacity: 100
`)
}

func TestConfigMapValueScalars(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
configMaps:
  config-autoscaler:
    enable-scale-to-zero: false
    max-scale-up-rate: 100.5
    initial-scale: 2
    scale-to-zero-grace-period: 45s
  config-deployment:
    queue-sidecar-rootca:
`)
	want := map[string]string{
		"enable-scale-to-zero":       "false",
		"max-scale-up-rate":          "100.5",
		"initial-scale":              "2",
		"scale-to-zero-grace-period": "45s",
	}
	if got := c.ConfigMaps["config-autoscaler"]; !reflect.DeepEqual(got, want) {
		t.Errorf("data = %v, want %v", got, want)
	}
	if got, ok := c.ConfigMaps["config-deployment"]["queue-sidecar-rootca"]; !ok || got != "" {
		t.Errorf("null value = %q, %v; want an empty string", got, ok)
	}
}

func TestValidateAfterChange(t *testing.T) {
	t.Parallel()
	c := Default()
	c.HTTPAddr = "nope"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "httpAddr") {
		t.Errorf("err = %v", err)
	}
	c = Default()
	c.ConfigMaps["config-logging"] = map[string]string{}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `"config-logging"`) {
		t.Errorf("err = %v", err)
	}
}

func FuzzLoad(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("..", "..", "docs", "knbox.example.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example))
	f.Add("")
	f.Add("apiAddr: 127.0.0.1:1\nconfigMaps:\n  config-gc:\n    min-non-active-revisions: 1\n")
	f.Add("configMaps:\n  config-domain:\n    a.b: |\n      selector:\n        x: y\n")
	f.Add("egress:\n  enabled: true\n  subnet: 10.89.0.0/16\n  bridge: knbox0\n  nameservers: [192.0.2.53]\n")
	f.Add("policy:\n  refuseRoot: true\n  seccompProfile: Unconfined\n  pidsLimit: -1\n  maskedPaths: []\n  addableCapabilities: [NET_RAW]\nruntimes:\n  process:\n    enabled: true\n")
	f.Add("limits:\n  preparedSandboxes:\n    count: -1\n    memory: 1Ki\n    disabled: true\n")
	f.Add("limits:\n  idleShims:\n    count: 2\n    keepFor: 1m\n    disabled: true\n")
	f.Add("limits:\n  ephemeralStorage:\n    interval: 2s\n    defaultContainerLimit: 1Gi\n    maxFiles: 10\n    maxDepth: 4\n")
	f.Add("limits:\n  api:\n    maxObjectBytes: 1Mi\n    requestTimeout: 30s\n    maxObjectBytesByResource:\n      configmaps: 512Ki\n  router:\n    readTimeout: 0s\n  images:\n    maxLayerBytes: 1Gi\n")
	f.Add("configMaps:\n  config-deployment:\n    queue-sidecar-image: x\n  config-network:\n    http-protocol: Enabled\n")
	f.Add("serviceAccounts:\n  issuer: https://knbox.example\n  apiAudiences: [a, b]\n  maxTokenExpirationSeconds: 86400\n")
	f.Add("podSecurity:\n  defaults: {enforce: baseline, warn: restricted, warn-version: v1.29}\n  exemptions: {runtimeClasses: [runsc]}\nruntimeClasses:\n  defaultAllowed: [runc, runsc]\n")
	f.Add("observability:\n  metricsAddr: 127.0.0.1:9090\n  queueLength: 10\n  accessLog: {enabled: true, path: /var/log/knbox/access.log}\n")
	f.Fuzz(func(t *testing.T, content string) {
		c, err := parse([]byte(content))
		if err != nil {
			return
		}
		// Whatever Load accepts, every accessor must parse.
		if _, err := c.Serving(); err != nil {
			t.Fatalf("Serving after a valid Load: %v", err)
		}
		if _, err := c.GC(); err != nil {
			t.Fatalf("GC after a valid Load: %v", err)
		}
		if _, err := c.Network(); err != nil {
			t.Fatalf("Network after a valid Load: %v", err)
		}
		if _, err := c.Domain(); err != nil {
			t.Fatalf("Domain after a valid Load: %v", err)
		}
		if _, err := c.Deployment(); err != nil {
			t.Fatalf("Deployment after a valid Load: %v", err)
		}
		if _, err := c.PodSecurityConfiguration(); err != nil {
			t.Fatalf("PodSecurityConfiguration after a valid Load: %v", err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Validate after a valid Load: %v", err)
		}
		if p := c.EgressSubnet(); !p.IsValid() || !p.Addr().Is4() {
			t.Fatalf("egress subnet %q accepted, but it is not an IPv4 prefix", c.Egress.Subnet)
		}
		// Every bound is there and positive.
		l := c.Limits
		for name, v := range map[string]int64{
			"api.maxConnections": int64(l.API.MaxConnections), "api.maxObjectBytes": int64(l.API.MaxObjectBytes),
			"api.requestTimeout": int64(l.API.RequestTimeout), "router.idleTimeout": int64(l.Router.IdleTimeout),
			"store.eventLogBytes": int64(l.Store.EventLogBytes), "disk.reserveBytes": int64(l.Disk.ReserveBytes),
			"images.maxImageBytes": int64(l.Images.MaxImageBytes), "images.maxLayers": int64(l.Images.MaxLayers),
			"ephemeralStorage.interval": int64(l.EphemeralStorage.Interval), "ephemeralStorage.maxFiles": int64(l.EphemeralStorage.MaxFiles),
			"ephemeralStorage.maxDepth":            int64(l.EphemeralStorage.MaxDepth),
			"observability.queueLength":            int64(c.Observability.QueueLength),
			"observability.console.maxSessions":    int64(c.Observability.Console.MaxSessions),
			"observability.console.sessionTTL":     int64(c.Observability.Console.SessionTTL),
			"observability.console.sampleInterval": int64(c.Observability.Console.SampleInterval),
			"observability.console.samples":        int64(c.Observability.Console.Samples),
			"builds.defaultTimeout":                int64(c.Builds.DefaultTimeout),
			"builds.maxTimeout":                    int64(c.Builds.MaxTimeout),
			"builds.maxUploadBytes":                c.Builds.MaxUploadBytes,
			"builds.maxSourceBytes":                c.Builds.MaxSourceBytes,
			"builds.maxSourceFiles":                c.Builds.MaxSourceFiles,
			"builds.gitTimeout":                    int64(c.Builds.GitTimeout),
			"builds.maxGitFetchBytes":              c.Builds.MaxGitFetchBytes,
			"preparedSandboxes.count":              int64(l.PreparedSandboxes.Count),
			"preparedSandboxes.memory":             int64(l.PreparedSandboxes.Memory),
			"idleShims.count":                      int64(l.IdleShims.Count),
			"idleShims.keepFor":                    int64(l.IdleShims.KeepFor),
		} {
			if v <= 0 {
				t.Fatalf("limits.%s = %d accepted", name, v)
			}
		}
		for r, n := range l.API.MaxObjectBytesByResource {
			if n <= 0 {
				t.Fatalf("limits.api.maxObjectBytesByResource.%s = %d accepted", r, n)
			}
		}
	})
}

// TestEveryFieldLoads keeps fileConfig in step with Config: a setting that
// Config has but the file cannot carry would be refused as unknown.
func TestEveryFieldLoads(t *testing.T) {
	file := map[string]reflect.Type{}
	ft := reflect.TypeOf(fileConfig{})
	for i := 0; i < ft.NumField(); i++ {
		tag, _, _ := strings.Cut(ft.Field(i).Tag.Get("json"), ",")
		file[tag] = ft.Field(i).Type
	}
	ct := reflect.TypeOf(Config{})
	for i := 0; i < ct.NumField(); i++ {
		f := ct.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "" || tag == "-" || tag == "configMaps" {
			continue
		}
		typ, ok := file[tag]
		if !ok {
			t.Errorf("Config.%s (%q) cannot be set in the file: fileConfig has no such field", f.Name, tag)
		} else if typ != f.Type {
			t.Errorf("Config.%s (%q) is %v, fileConfig's is %v", f.Name, tag, f.Type, typ)
		}
	}
	c := mustParse(t, "restart:\n  keepInstances: false\n  handoverTimeout: 3s\n")
	if c.KeepsInstances() {
		t.Error("restart.keepInstances: false was not applied")
	}
}

// TestBuilds: the builds' bounds and registries are checked with the key's
// name.
func TestBuilds(t *testing.T) {
	c := mustParse(t, "builds:\n  defaultTimeout: 1m\n  maxTimeout: 1h\n  registries: [\"127.0.0.1:5000\", \"localhost:6000\", \"[::1]:7000\"]\n")
	if c.Builds.DefaultTimeout != Duration(time.Minute) || c.Builds.MaxTimeout != Duration(time.Hour) || len(c.Builds.Registries) != 3 {
		t.Errorf("builds %+v", c.Builds)
	}
	for _, bad := range []string{
		"builds:\n  defaultTimeout: 1h\n  maxTimeout: 1m\n",
		"builds:\n  defaultTimeout: 1ms\n",
		"builds:\n  registries: [\"10.0.0.1:5000\"]\n",
		"builds:\n  registries: [\"127.0.0.1\"]\n",
		"builds:\n  registries: [\"localhost.evil.com:5000\"]\n",
		"builds:\n  registries: [\"127.0.0.1:0\"]\n",
		"builds:\n  maxUploadBytes: -1\n",
	} {
		if _, err := parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "builds.") {
			t.Errorf("%q: %v, want an error naming builds.*", bad, err)
		}
	}
}
