package config

import (
	"fmt"
	"net/url"
	"strings"
)

// ServiceAccounts configures the tokens of ServiceAccounts (TokenRequest,
// projected serviceAccountToken volumes), as kube-apiserver's
// --service-account-* flags do. Zero values are the defaults.
type ServiceAccounts struct {
	// Issuer is the iss claim of every token; "" means
	// https://kubernetes.default.svc.cluster.local (kubeadm's). Tokens
	// issued under another issuer stop working when it changes.
	Issuer string `json:"issuer,omitempty"`
	// APIAudiences are the audiences the API accepts in a token, and those
	// a token gets when its request names none; empty means [Issuer].
	APIAudiences []string `json:"apiAudiences,omitempty"`
	// MaxTokenExpirationSeconds caps the lifetime of issued tokens (a
	// longer request gets this one); 0 means one year.
	MaxTokenExpirationSeconds int64 `json:"maxTokenExpirationSeconds,omitempty"`
}

func (s *ServiceAccounts) validate() error {
	if s.Issuer != "" {
		if strings.TrimSpace(s.Issuer) != s.Issuer || strings.ContainsAny(s.Issuer, " \t\n") {
			return fmt.Errorf("serviceAccounts.issuer: %q must not contain spaces", s.Issuer)
		}
		if strings.Contains(s.Issuer, ":") {
			if u, err := url.Parse(s.Issuer); err != nil || u.Scheme != "https" || u.Host == "" {
				return fmt.Errorf("serviceAccounts.issuer: %q must be an https URL (or a name without a colon)", s.Issuer)
			}
		}
	}
	for i, a := range s.APIAudiences {
		if strings.TrimSpace(a) == "" {
			return fmt.Errorf("serviceAccounts.apiAudiences[%d]: must not be empty", i)
		}
	}
	if m := s.MaxTokenExpirationSeconds; m != 0 && (m < 600 || m > 1<<32) {
		return fmt.Errorf("serviceAccounts.maxTokenExpirationSeconds: %d is outside [600, 2^32] (0 means one year)", m)
	}
	return nil
}
