package config

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"
	psaapi "k8s.io/pod-security-admission/admission/api"
	psav1 "k8s.io/pod-security-admission/admission/api/v1"
	psavalidation "k8s.io/pod-security-admission/admission/api/validation"
)

// PodSecurity is the server-wide part of Pod Security admission, with the
// keys of Kubernetes' PodSecurityConfiguration (its defaults and exemptions
// sections): the levels of namespaces that carry no
// pod-security.kubernetes.io labels, and who is exempt. Unset levels are
// Kubernetes' defaults (privileged, latest), so nothing is checked until a
// namespace asks for it.
type PodSecurity struct {
	Defaults   psav1.PodSecurityDefaults   `json:"defaults,omitempty"`
	Exemptions psav1.PodSecurityExemptions `json:"exemptions,omitempty"`
}

// RuntimeClasses is the operator's RuntimeClass access policy. Each
// namespace may narrow it with the runtime.knbox.dev/allowed annotation
// and name its own default with runtime.knbox.dev/default.
type RuntimeClasses struct {
	// DefaultAllowed lists the RuntimeClasses that namespaces without the
	// runtime.knbox.dev/allowed annotation may use; empty: every one. It
	// must include defaultRuntimeClass, the class of Revisions that name
	// none.
	DefaultAllowed []string `json:"defaultAllowed,omitempty"`
}

// PodSecurityConfiguration returns the Pod Security admission
// configuration with Kubernetes' defaults filled in.
func (c *Config) PodSecurityConfiguration() (*psaapi.PodSecurityConfiguration, error) {
	d := c.PodSecurity.Defaults
	psav1.SetDefaults_PodSecurityDefaults(&d)
	e := c.PodSecurity.Exemptions
	pc := &psaapi.PodSecurityConfiguration{
		Defaults: psaapi.PodSecurityDefaults{
			Enforce: d.Enforce, EnforceVersion: d.EnforceVersion,
			Audit: d.Audit, AuditVersion: d.AuditVersion,
			Warn: d.Warn, WarnVersion: d.WarnVersion,
		},
		Exemptions: psaapi.PodSecurityExemptions{
			Usernames:      slices.Clone(e.Usernames),
			Namespaces:     slices.Clone(e.Namespaces),
			RuntimeClasses: slices.Clone(e.RuntimeClasses),
		},
	}
	if errs := psavalidation.ValidatePodSecurityConfiguration(pc); len(errs) > 0 {
		return nil, fmt.Errorf("podSecurity: %w", errs.ToAggregate())
	}
	return pc, nil
}

func (c *Config) validateTenants() error {
	if _, err := c.PodSecurityConfiguration(); err != nil {
		return err
	}
	allowed := c.RuntimeClasses.DefaultAllowed
	for i, name := range allowed {
		if name == "*" {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return fmt.Errorf("runtimeClasses.defaultAllowed[%d]: %q: %s", i, name, errs[0])
		}
	}
	if len(allowed) > 0 && !slices.Contains(allowed, "*") && !slices.Contains(allowed, c.DefaultRuntimeClass) {
		return errors.New("runtimeClasses.defaultAllowed: must include defaultRuntimeClass " + fmt.Sprintf("%q", c.DefaultRuntimeClass) +
			", the RuntimeClass of Revisions that name none")
	}
	return nil
}
