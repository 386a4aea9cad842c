package daemon

import (
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	servingcfg "knative.dev/serving/pkg/apis/config"

	"github.com/knbox/knbox/pkg/admission"
	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/oci"
)

// newAdmitter wires admission with knbox's configuration: Knative's
// ConfigMaps, Pod Security's server-wide levels and exemptions, the
// RuntimeClass access policy, and what the runtime applies to every
// container (policy must be the oci.Policy the instances run with).
func newAdmitter(cfg *config.Config, serving *servingcfg.Config, policy oci.Policy, log *slog.Logger) (*admission.Admitter, error) {
	psa, err := cfg.PodSecurityConfiguration()
	if err != nil {
		return nil, err
	}
	return &admission.Admitter{
		Serving:     serving,
		PodSecurity: psa,
		RuntimeClasses: admission.RuntimeClassPolicy{
			Default:        cfg.DefaultRuntimeClass,
			DefaultAllowed: cfg.RuntimeClasses.DefaultAllowed,
		},
		InstanceDefaults: func(pod *corev1.PodSpec) { oci.Declare(pod, policy) },
		AllowExecProbes:  cfg.Policy.AllowExecProbes,
		ClusterDomain:    cfg.ClusterDomain,
		Builds: buildv1alpha1.Limits{DefaultTimeout: time.Duration(cfg.Builds.DefaultTimeout),
			MaxTimeout: time.Duration(cfg.Builds.MaxTimeout)},
		Logger: log.With("component", "admission"),
	}, nil
}
