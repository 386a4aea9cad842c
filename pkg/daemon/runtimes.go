package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/runtime"
)

// BuiltinLabel marks the RuntimeClasses knbox registers for the handlers
// that work on this host.
const BuiltinLabel = "knbox.dev/builtin"

// handlers builds a runtime.Handler for each entry of the runtimes table.
// An OCI runtime whose binary is missing is left out, with the reason.
func handlers(cfg *config.Config) (map[string]runtime.Handler, map[string]error) {
	hs := map[string]runtime.Handler{}
	missing := map[string]error{}
	for _, name := range slices.Sorted(maps.Keys(cfg.Runtimes)) {
		rt := cfg.Runtimes[name]
		switch rt.Type {
		case config.RuntimeProcess:
			hs[name] = runtime.NewProcess(cfg.RuntimeRoot(name))
		default:
			h, err := runtime.NewOCI(runtime.OCIConfig{Name: name, Binary: rt.Binary, Root: cfg.RuntimeRoot(name), Args: rt.Args,
				ManageCgroups: rt.ManagesCgroups()})
			if err != nil {
				missing[name] = err
				continue
			}
			hs[name] = h
		}
	}
	return hs, missing
}

// probeHandlers runs a trivial container with each handler (in parallel,
// each bounded) and returns those that work, logging why others do not.
func probeHandlers(ctx context.Context, hs map[string]runtime.Handler, scratch string, log *slog.Logger) map[string]runtime.Handler {
	// What a knbox killed while probing left: its probe containers (each
	// handler's own root, so in parallel), then their bundles.
	eachHandler(ctx, hs, func(ctx context.Context, name string, h runtime.Handler) {
		n, err := runtime.RemoveProbeLeftovers(ctx, h)
		if err != nil {
			log.Warn("removing probe containers of an earlier run", "handler", name, "err", err)
		} else if n > 0 {
			log.Info("removed probe containers of an earlier run", "handler", name, "containers", n)
		}
	})
	if n := runtime.RemoveStaleProbeCgroups("/sys/fs/cgroup", runtime.ProbeCgroupMaxAge); n > 0 {
		log.Info("removed probe cgroups left by earlier runs", "cgroups", n)
	}
	if err := os.RemoveAll(scratch); err != nil {
		log.Warn("runtime probe: clearing the scratch directory", "err", err)
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		log.Error("runtime probe", "err", err)
		return nil
	}
	var mu sync.Mutex
	ok := map[string]runtime.Handler{}
	eachHandler(ctx, hs, func(ctx context.Context, name string, h runtime.Handler) {
		if err := runtime.Available(ctx, h, scratch); err != nil {
			log.Warn("runtime handler does not work on this host", "handler", name, "err", err)
			return
		}
		mu.Lock()
		ok[name] = h
		mu.Unlock()
	})
	return ok
}

// eachHandler runs f for every handler, in parallel, each within a minute,
// and returns when all have returned.
func eachHandler(ctx context.Context, hs map[string]runtime.Handler, f func(ctx context.Context, name string, h runtime.Handler)) {
	var wg sync.WaitGroup
	for name, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			f(hctx, name, h)
		}()
	}
	wg.Wait()
}

// registerRuntimeClasses makes sure a RuntimeClass named after each working
// handler exists (handler = its name), so `kubectl get runtimeclass` shows
// what this host can run and revisions can name them.
func registerRuntimeClasses(ctx context.Context, kube kubernetes.Interface, names []string) error {
	for _, name := range names {
		rc := &nodev1.RuntimeClass{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{BuiltinLabel: "true"}},
			Handler:    name,
		}
		_, err := kube.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("register runtimeclass %s: %w", name, err)
		}
	}
	return nil
}

// setUpRuntimes builds and probes the handlers, then registers their
// RuntimeClasses through the API (which is already serving, so a slow
// probe does not delay it).
func setUpRuntimes(ctx context.Context, cfg *config.Config, kube kubernetes.Interface, log *slog.Logger) map[string]runtime.Handler {
	hs, missing := handlers(cfg)
	for name, err := range missing {
		log.Info("runtime handler not installed", "handler", name, "err", err)
	}
	ok := probeHandlers(ctx, hs, filepath.Join(cfg.DataDir, "probe"), log)
	names := slices.Sorted(maps.Keys(ok))
	if err := registerRuntimeClasses(ctx, kube, names); err != nil {
		log.Error("runtime classes", "err", err)
	}
	log.Info("runtime handlers ready", "handlers", names)
	return ok
}
