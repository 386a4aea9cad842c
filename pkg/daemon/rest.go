package daemon

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/filepages"
)

// restPoll is how often the rest policy reads what the process allocated,
// and restWindow how many of those readings the allocation rate is taken
// over: a server at rest has periodic work (a scrape, a status check)
// that allocates a MiB in one second every ten, which a window of ten
// seconds averages out, while a burst of API writes allocates several MiB
// every second and ends the rest within a second or two.
const (
	restPoll   = time.Second
	restWindow = 10
)

// gcRest is limits.memory.rest: the collector's target drops once the
// process has been quiet for a while, and is back as soon as it is busy.
// It only decides; the runtime calls are its fields, so that a test
// drives it without touching the process's collector.
type gcRest struct {
	after         time.Duration
	restPercent   int
	activePercent int
	quietRate     float64 // bytes per second

	setPercent func(int) // debug.SetGCPercent
	release    func()    // debug.FreeOSMemory

	resting    bool
	quietSince time.Time
	readings   []allocReading // the last restWindow+1, oldest first
}

type allocReading struct {
	at        time.Time
	allocated uint64
}

// observe takes the process's allocated bytes so far, read at now, and
// reports whether the process rests after it.
func (g *gcRest) observe(now time.Time, allocated uint64) bool {
	if n := len(g.readings); n > 0 && !now.After(g.readings[n-1].at) {
		return g.resting // the clock stood still or stepped back: decide nothing
	}
	g.readings = append(g.readings, allocReading{now, allocated})
	if len(g.readings) > restWindow+1 {
		g.readings = g.readings[1:]
	}
	if len(g.readings) == 1 {
		g.quietSince = now
		return g.resting
	}
	oldest := g.readings[0]
	rate := 0.0
	if allocated > oldest.allocated {
		rate = float64(allocated-oldest.allocated) / now.Sub(oldest.at).Seconds()
	}
	switch {
	case rate >= g.quietRate:
		g.quietSince = now
		if g.resting {
			g.resting = false
			g.setPercent(g.activePercent)
		}
	case !g.resting && now.Sub(g.quietSince) >= g.after:
		g.resting = true
		g.setPercent(g.restPercent)
		g.release()
	}
	return g.resting
}

// restGC runs limits.memory.rest until ctx ends, unless it is disabled or
// GOGC is set in the environment (which then decides the target alone).
// Coming to rest, it calls drop (if not nil: caches to let go of, such as
// the store's cache of recent events), returns the free memory to the
// system, and unmaps the pages of knbox's binary and of files (knbox.db),
// unless rest.keepPages.
func restGC(ctx context.Context, m config.MemoryLimits, log *slog.Logger, drop func(), files ...string) {
	if _, ok := os.LookupEnv("GOGC"); ok || m.Rest.Disabled || m.GCPercent <= 0 {
		return
	}
	selfRefreshed := false
	g := &gcRest{
		after: m.Rest.After.D(), restPercent: m.Rest.GCPercent, activePercent: m.GCPercent,
		quietRate:  float64(m.Rest.QuietBytesPerSecond),
		setPercent: func(p int) { debug.SetGCPercent(p) },
		release: func() {
			if drop != nil {
				drop()
			}
			debug.FreeOSMemory()
			if m.Rest.KeepPages {
				return
			}
			for _, f := range append([]string{filepages.Self}, files...) {
				if _, err := filepages.Unmap(f); err != nil {
					log.Warn("could not unmap a file's pages at rest", "err", err)
					continue
				}
				// The binary's cache as its start read it, once; the
				// store's at every rest (its commits write it anew).
				if f == filepages.Self && selfRefreshed {
					continue
				}
				if err := filepages.Refresh(f); err != nil {
					log.Warn("could not refresh a file's page cache at rest", "err", err)
				}
			}
			selfRefreshed = true
		},
	}
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[0].Value.Uint64()
	}
	g.observe(time.Now(), read())
	t := time.NewTicker(restPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if g.resting {
				debug.SetGCPercent(g.activePercent)
			}
			return
		case now := <-t.C:
			was := g.resting
			// Info: at most one pair of these per quiet spell (After).
			switch is := g.observe(now, read()); {
			case is && !was:
				log.Info("at rest", "gcPercent", g.restPercent, "pagesUnmapped", !m.Rest.KeepPages)
			case was && !is:
				log.Info("busy again", "gcPercent", g.activePercent)
			}
		}
	}
}
