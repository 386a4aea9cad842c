package config

import "testing"

// TestSecurePodDefaultsFollowsPolicy: knbox turns Knative's
// secure-pod-defaults on when its policy already applies all of it, and
// config-features still decides when it says so.
func TestSecurePodDefaultsFollowsPolicy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		enabled bool
	}{
		{name: "defaults"},
		{name: "refuseRoot", mutate: func(c *Config) { c.Policy.RefuseRoot = true }, enabled: true},
		{name: "refuseRoot unconfined", mutate: func(c *Config) {
			c.Policy.RefuseRoot, c.Policy.SeccompProfile = true, SeccompUnconfined
		}},
		{name: "refuseRoot extra capability", mutate: func(c *Config) {
			c.Policy.RefuseRoot, c.Policy.DefaultCapabilities = true, []string{"NET_BIND_SERVICE", "CHOWN"}
		}},
		{name: "refuseRoot but config-features disables", mutate: func(c *Config) {
			c.Policy.RefuseRoot = true
			c.ConfigMaps = map[string]map[string]string{FeaturesName: {SecurePodDefaultsFeature: "disabled"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			if tc.mutate != nil {
				tc.mutate(c)
			}
			s, err := c.Serving()
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Features.SecurePodDefaults == "Enabled"; got != tc.enabled {
				t.Errorf("secure-pod-defaults %q, want enabled %v", s.Features.SecurePodDefaults, tc.enabled)
			}
		})
	}
}
