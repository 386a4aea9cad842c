package daemon

import (
	"maps"
	"slices"

	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/runtime"
)

// runtimeHandlers lists the working handlers for their RuntimeClasses,
// with what those that do not isolate (process) lack.
func runtimeHandlers(hs map[string]runtime.Handler) []controller.RuntimeHandler {
	out := make([]controller.RuntimeHandler, 0, len(hs))
	for _, name := range slices.Sorted(maps.Keys(hs)) {
		h := controller.RuntimeHandler{Name: name}
		if u, ok := hs[name].(runtime.Unisolated); ok {
			h.Unisolated = u.Unisolated()
		}
		out = append(out, h)
	}
	return out
}

// disabledRuntimes names the runtimes of the table that the config does not
// enable (process, unless the operator turns it on).
func disabledRuntimes(cfg *config.Config) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Runtimes)) {
		if !cfg.Runtimes[name].IsEnabled() {
			out = append(out, name)
		}
	}
	return out
}
