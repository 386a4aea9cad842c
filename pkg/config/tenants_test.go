package config

import (
	"strings"
	"testing"
)

func TestTenantsConfig(t *testing.T) {
	t.Parallel()
	c, err := parse([]byte("podSecurity:\n  defaults: {enforce: baseline, warn: restricted}\n  exemptions: {runtimeClasses: [runsc]}\nruntimeClasses:\n  defaultAllowed: [runc, runsc]\n"))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := c.PodSecurityConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	d := pc.Defaults
	if d.Enforce != "baseline" || d.EnforceVersion != "latest" || d.Warn != "restricted" || d.Audit != "privileged" {
		t.Errorf("defaults %+v", d)
	}
	if got := pc.Exemptions.RuntimeClasses; len(got) != 1 || got[0] != "runsc" {
		t.Errorf("exemptions %+v", pc.Exemptions)
	}
	// Without the section: Kubernetes' defaults, nothing enforced.
	pc, err = Default().PodSecurityConfiguration()
	if err != nil || pc.Defaults.Enforce != "privileged" || pc.Defaults.Warn != "privileged" {
		t.Errorf("default pod security %+v, %v", pc, err)
	}

	for _, tt := range []struct{ content, want string }{
		{"podSecurity:\n  defaults: {enforce: strict}\n", "podSecurity: defaults.enforce"},
		{"podSecurity:\n  defaults: {warn-version: v1.x}\n", "defaults.warn-version"},
		{"podSecurity:\n  defaults: {enforc: baseline}\n", `unknown field "enforc"`},
		{"runtimeClasses:\n  defaultAllowed: [Not_A_Name]\n", "runtimeClasses.defaultAllowed[0]"},
		{"runtimeClasses:\n  defaultAllowed: [runsc]\n", `must include defaultRuntimeClass "runc"`},
	} {
		if _, err := parse([]byte(tt.content)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err %v, want %q", tt.content, err, tt.want)
		}
	}
	if _, err := parse([]byte("defaultRuntimeClass: runsc\nruntimeClasses:\n  defaultAllowed: [runsc]\n")); err != nil {
		t.Errorf("runsc only, and the default: %v", err)
	}
}
