package daemon

import (
	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/oci"
)

// containerPolicy turns the config's policy section into what oci.Build
// applies to every container. Capability names are checked here, where
// they are known (package oci), so a typo stops the daemon at start;
// RLIMIT_NOFILE is lowered to what the runtime can grant.
func containerPolicy(p config.Policy) (oci.Policy, error) {
	out := oci.Policy{
		RefuseRoot:    p.RefuseRoot,
		Seccomp:       p.Seccomp,
		Unconfined:    p.Unconfined(),
		MaskedPaths:   p.MaskedPaths,
		ReadonlyPaths: p.ReadonlyPaths,
		PidsLimit:     p.PidsLimit,
		OpenFiles:     p.OpenFiles,
	}
	if out.OpenFiles == 0 {
		out.OpenFiles = oci.DefaultOpenFiles
	}
	// runc cannot give a container more open files than its own hard limit.
	out.OpenFiles = min(out.OpenFiles, oci.MaxOpenFiles())
	var err error
	if p.DefaultCapabilities != nil {
		if out.DefaultCapabilities, err = oci.CheckCapabilities("policy.defaultCapabilities", p.DefaultCapabilities); err != nil {
			return oci.Policy{}, err
		}
	}
	if p.AddableCapabilities != nil {
		if out.AddableCapabilities, err = oci.CheckCapabilities("policy.addableCapabilities", p.AddableCapabilities); err != nil {
			return oci.Policy{}, err
		}
	}
	return out, nil
}
