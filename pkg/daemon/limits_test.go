package daemon

import (
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/knbox/knbox/pkg/config"
)

// TestTuneGC: limits.memory sets the collector's target and soft limit,
// unless GOGC and GOMEMLIMIT set them from the environment.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, v := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Setenv(v, "") // restored after the test
		os.Unsetenv(v)
	}
	tuneGC(config.MemoryLimits{GCPercent: 50, SoftLimit: 64 << 20}, log)
	if got := debug.SetGCPercent(100); got != 50 {
		t.Errorf("gcPercent %d, want 50", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != 64<<20 {
		t.Errorf("soft limit %d, want 64 MiB", got)
	}
	// The default is knbox's, not Go's: it is set too.
	tuneGC(config.MemoryLimits{GCPercent: config.DefaultGCPercent}, log)
	if got := debug.SetGCPercent(100); got != config.DefaultGCPercent {
		t.Errorf("gcPercent %d with the default, want %d", got, config.DefaultGCPercent)
	}

	t.Setenv("GOGC", "200")
	t.Setenv("GOMEMLIMIT", "1GiB")
	tuneGC(config.MemoryLimits{GCPercent: 50, SoftLimit: 64 << 20}, log)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("gcPercent %d with GOGC set, want 100 (unchanged)", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("soft limit %d with GOMEMLIMIT set, want none (unchanged)", got)
	}
}
