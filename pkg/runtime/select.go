package runtime

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"
)

// probeTimeout bounds each handler's part of Select.
const probeTimeout = time.Minute

// Select returns the handlers of hs that work on this host: each runs a
// trivial container (Available) in scratch, in parallel, each within a
// minute; why the others do not is logged. First it removes what a process
// killed while selecting left: probe containers, probe cgroups older than
// ProbeCgroupMaxAge and the scratch directory.
func Select(ctx context.Context, hs map[string]Handler, scratch string, log *slog.Logger) map[string]Handler {
	eachHandler(ctx, hs, func(ctx context.Context, name string, h Handler) {
		n, err := RemoveProbeLeftovers(ctx, h)
		if err != nil {
			log.Warn("removing probe containers of an earlier run", "handler", name, "err", err)
		} else if n > 0 {
			log.Info("removed probe containers of an earlier run", "handler", name, "containers", n)
		}
	})
	if n := RemoveStaleProbeCgroups("/sys/fs/cgroup", ProbeCgroupMaxAge); n > 0 {
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
	ok := map[string]Handler{}
	eachHandler(ctx, hs, func(ctx context.Context, name string, h Handler) {
		if err := Available(ctx, h, scratch); err != nil {
			log.Warn("runtime handler does not work on this host", "handler", name, "err", err)
			return
		}
		mu.Lock()
		ok[name] = h
		mu.Unlock()
	})
	return ok
}

// eachHandler runs f for every handler, in parallel, each within
// probeTimeout, and returns when all have returned.
func eachHandler(ctx context.Context, hs map[string]Handler, f func(ctx context.Context, name string, h Handler)) {
	var wg sync.WaitGroup
	for name, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			f(hctx, name, h)
		}()
	}
	wg.Wait()
}
