package config

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/pkg/configmap"
	tracingconfig "knative.dev/pkg/tracing/config"
	servingcfg "knative.dev/serving/pkg/apis/config"
	ascfg "knative.dev/serving/pkg/autoscaler/config"
	"knative.dev/serving/pkg/deployment"
	gcconfig "knative.dev/serving/pkg/gc"
)

// Knative's parsers ignore keys they do not know, so a typo passes
// silently, and knbox does not act on every key Knative reads. Load refuses
// both: a key no parser reads, and a key knbox does not honour set to
// anything but Knative's default (a value that parses as if the key were
// absent is accepted, so a cluster's ConfigMap with defaults loads).
//
// Honoured: every key of config-defaults, config-gc and config-domain (a
// domain per key), and config-features (checked in features); in
// config-autoscaler all but the ones below; in config-network the domain and
// tag templates, autocreate-cluster-domain-claims (DomainMappings) and
// default-external-scheme (the scheme of URLs in status); in config-deployment progress-deadline,
// digest-resolution-timeout and registries-skipping-tag-resolving (tags of
// those registries are resolved from loaded images only, never by asking
// the registry), with their old camelCase spellings.
type keyRules struct {
	parse func(map[string]string) (any, error)
	// honoured, when set, lists the keys knbox acts on; the others are
	// refused unless set to their default. Nil: all keys are honoured.
	honoured []string
	// also lists values accepted besides the default, by key.
	also map[string][]string
	// why says why a key is not honoured, by key; "" has the general
	// reason.
	why map[string]string
}

var configMapKeys = map[string]keyRules{
	DefaultsName: {parse: func(d map[string]string) (any, error) { return servingcfg.NewDefaultsConfigFromMap(d) }},
	GCName: {parse: func(d map[string]string) (any, error) {
		return gcconfig.NewConfigFromConfigMapFunc(context.Background())(&corev1.ConfigMap{Data: d})
	}},
	AutoscalerName: {
		parse: func(d map[string]string) (any, error) { return ascfg.NewConfigFromMap(d) },
		honoured: []string{
			"enable-scale-to-zero", "allow-zero-initial-scale", "max-scale-up-rate", "max-scale-down-rate",
			"container-concurrency-target-percentage", "container-concurrency-target-default",
			"requests-per-second-target-default", "panic-window-percentage", "panic-threshold-percentage",
			"initial-scale", "min-scale", "max-scale", "max-scale-limit", "stable-window", "scale-down-delay",
			"scale-to-zero-grace-period", "scale-to-zero-pod-retention-period",
		},
		also: map[string][]string{"target-burst-capacity": {"-1"}},
		why: map[string]string{
			"pod-autoscaler-class":  "knbox scales with Knative's KPA only",
			"target-burst-capacity": "knbox's router is always in the request path, as with -1",
			"activator-capacity":    "knbox's router is the activator, with no capacity of its own",
			"":                      "knbox does not use it",
		},
	},
	NetworkName: {
		parse: func(d map[string]string) (any, error) { return netcfg.NewConfigFromMap(d) },
		honoured: []string{netcfg.DomainTemplateKey, netcfg.TagTemplateKey, "domainTemplate", "tagTemplate",
			netcfg.AutocreateClusterDomainClaimsKey, "autocreateClusterDomainClaims", netcfg.DefaultExternalSchemeKey, "defaultExternalScheme"},
		why: map[string]string{"": "knbox has no ingress, certificates, TLS between components or gradual rollout to configure"},
	},
	TracingName: {
		parse: func(d map[string]string) (any, error) { return tracingconfig.NewTracingConfigFromMap(d) },
	},
	DeploymentName: {
		parse: func(d map[string]string) (any, error) { return parseDeployment(d) },
		honoured: []string{
			deployment.ProgressDeadlineKey, "progressDeadline",
			"digest-resolution-timeout", "digestResolutionTimeout",
			"registries-skipping-tag-resolving", "registriesSkippingTagResolving",
		},
		why: map[string]string{
			deployment.RuntimeClassNameKey: "set defaultRuntimeClass, or runtimeClassName in the Revision template",
			"default-affinity-type":        "knbox runs on one machine",
			"":                             "knbox has no queue-proxy sidecar: its router does that job",
		},
	},
}

// probeValues are tried to tell whether a parser reads a key: a value that
// changes the parsed config or makes it fail shows that it does.
var probeValues = []string{"", "0", "1", "2", "-1", "0.5", "true", "false", "1s", "10m", "x", "enabled", "disabled", "{{.Name}}", "selector:\n  a: b"}

// reads tells whether parse reads key (with the other keys of data).
func reads(parse func(map[string]string) (any, error), data map[string]string, key string) bool {
	base := maps.Clone(data)
	delete(base, key)
	want, err := parse(base)
	if err != nil {
		return true // cannot tell: let the parser's own error speak
	}
	for _, v := range probeValues {
		probe := maps.Clone(base)
		probe[key] = v
		got, err := parse(probe)
		if err != nil || !reflect.DeepEqual(got, want) {
			return true
		}
	}
	return false
}

// checkKeys applies the rules of the ConfigMap name to data.
func checkKeys(name string, data map[string]string) error {
	rules, ok := configMapKeys[name]
	if !ok {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(data)) {
		if k == configmap.ExampleKey {
			continue
		}
		if !reads(rules.parse, data, k) {
			return fmt.Errorf("%s: unknown key %q", name, k)
		}
		if rules.honoured == nil || slices.Contains(rules.honoured, k) || slices.Contains(rules.also[k], data[k]) {
			continue
		}
		without := maps.Clone(data)
		delete(without, k)
		got, err1 := rules.parse(data)
		def, err2 := rules.parse(without)
		if err1 == nil && err2 == nil && reflect.DeepEqual(got, def) {
			continue // the default: as if absent
		}
		why := rules.why[k]
		if why == "" {
			why = rules.why[""]
		}
		return fmt.Errorf("%s: %s: not supported (%s); remove it or set Knative's default", name, k, strings.TrimSpace(why))
	}
	return nil
}

// parseDeployment parses config-deployment, filling queue-sidecar-image,
// which Knative requires, with QueueSidecarImageUnused.
func parseDeployment(user map[string]string) (*deployment.Config, error) {
	data := make(map[string]string, len(user)+1)
	maps.Copy(data, user)
	if data[deployment.QueueSidecarImageKey] == "" && data[deployment.DeprecatedQueueSidecarImageKey] == "" {
		data[deployment.QueueSidecarImageKey] = QueueSidecarImageUnused
	}
	return deployment.NewConfigFromMap(data)
}
