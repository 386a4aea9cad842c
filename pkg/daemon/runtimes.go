package daemon

import (
	"maps"
	"slices"

	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/runtime"
)

// handlers builds a runtime.Handler for each entry of the runtimes table.
// An OCI runtime whose binary is missing is left out, with the reason.
func handlers(cfg *config.Config) (map[string]runtime.Handler, map[string]error) {
	hs := map[string]runtime.Handler{}
	missing := map[string]error{}
	for _, name := range slices.Sorted(maps.Keys(cfg.Runtimes)) {
		rt := cfg.Runtimes[name]
		if !rt.IsEnabled() {
			continue // process by default: see config.Runtime.Enabled
		}
		switch rt.Type {
		case config.RuntimeProcess:
			hs[name] = runtime.NewProcess(cfg.RuntimeRoot(name))
		default:
			h, err := runtime.NewOCI(runtime.OCIConfig{Name: name, Binary: rt.Binary, Root: cfg.RuntimeRoot(name), Args: rt.Args,
				ManageCgroups: rt.ManagesCgroups(), SandboxENOSYS: rt.LetsSandboxAnswerENOSYS()})
			if err != nil {
				missing[name] = err
				continue
			}
			hs[name] = h
		}
	}
	return hs, missing
}
