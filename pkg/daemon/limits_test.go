package daemon

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// TestGCRest: the rest target comes after limits.memory.rest.after of
// quiet, with one release of free memory, and the active target is back
// once the allocation rate over the window passes the quiet rate; a
// periodic spike within the quiet rate and short quiet spells change
// nothing.
func TestGCRest(t *testing.T) {
	var percents []int
	releases := 0
	g := &gcRest{after: 30 * time.Second, restPercent: 10, activePercent: 50, quietRate: 1 << 20,
		setPercent: func(p int) { percents = append(percents, p) }, release: func() { releases++ }}
	start := time.Unix(1_700_000_000, 0)
	var allocated uint64
	at := func(sec int, inThatSecond uint64) bool {
		allocated += inThatSecond
		return g.observe(start.Add(time.Duration(sec)*time.Second), allocated)
	}
	quiet := func(sec int) uint64 { // 100 KiB/s, and 1.5 MiB every tenth second
		if sec%10 == 0 {
			return 1536 << 10
		}
		return 100 << 10
	}
	at(0, 0)
	for s := 1; s <= 20; s++ { // quiet, but not for long enough
		if at(s, quiet(s)) {
			t.Fatalf("resting after %d s of quiet", s)
		}
	}
	// Busy: the rate over the window stays above the quiet rate until the
	// reading of second 21 is the window's oldest (second 31); the last
	// busy reading is second 30.
	at(21, 20<<20)
	for s := 22; s < 60; s++ {
		if at(s, quiet(s)) {
			t.Fatalf("resting %d s after the last busy second", s-21)
		}
	}
	if !at(60, quiet(60)) {
		t.Fatal("not resting 30 s after the last busy reading")
	}
	for s := 61; s < 70; s++ {
		at(s, quiet(s))
	}
	if len(percents) != 1 || percents[0] != 10 || releases != 1 {
		t.Fatalf("at rest: targets %v, %d releases; want [10] and 1", percents, releases)
	}
	if at(70, 12<<20) {
		t.Fatal("still resting after a busy second")
	}
	if len(percents) != 2 || percents[1] != 50 || releases != 1 {
		t.Fatalf("after rest: targets %v, %d releases; want [10 50] and 1", percents, releases)
	}
	// Time that stands still or runs back (a clock step) decides nothing.
	if at(70, 0) || at(69, 0) || len(g.readings) != restWindow+1 {
		t.Fatalf("a reading taken without time passing (%d readings)", len(g.readings))
	}
}

// TestRestGCOff: GOGC in the environment or rest.disabled leave the
// target alone; restGC returns at once.
func TestRestGCOff(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(77))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background() // not cancelled: restGC must return by itself
	m := config.MemoryLimits{GCPercent: 50, Rest: config.MemoryRestLimits{Disabled: true,
		After: config.Duration(time.Millisecond), GCPercent: 10, QuietBytesPerSecond: 1 << 40}}
	restGC(ctx, m, log, nil)
	m.Rest.Disabled = false
	t.Setenv("GOGC", "77")
	restGC(ctx, m, log, nil)
	if got := debug.SetGCPercent(77); got != 77 {
		t.Fatalf("gcPercent %d, want 77 (unchanged)", got)
	}
}

// TestRestGCRuns: in this process, a quiet spell sets the rest target and
// unmaps the pages of a file mapped for reading (as knbox.db is); the end
// of restGC puts the active target back.
func TestRestGCRuns(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	t.Setenv("GOGC", "") // restored after the test
	os.Unsetenv("GOGC")
	db := filepath.Join(t.TempDir(), "knbox.db")
	f, err := os.Create(db)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{1}, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	mapped, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mapped)
	sum := 0
	for i := 0; i < len(mapped); i += 4096 {
		sum += int(mapped[i])
	}
	if sum != 256 || residentKiB(t, db) != 1024 {
		t.Fatalf("the mapped file: sum %d, %d KiB resident; want 256 and 1024", sum, residentKiB(t, db))
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	var dropped atomic.Bool
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		restGC(ctx, config.MemoryLimits{GCPercent: 50, Rest: config.MemoryRestLimits{
			After: config.Duration(time.Millisecond), GCPercent: 10, QuietBytesPerSecond: 1 << 40}}, log, func() { dropped.Store(true) }, db)
	}()
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	target := func() uint64 { metrics.Read(gogc); return gogc[0].Value.Uint64() }
	deadline := time.Now().Add(20 * time.Second)
	for target() != 10 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := target(); got != 10 {
		t.Fatalf("target %d after a quiet spell, want 10", got)
	}
	// The pages go as the target drops: give the release a moment.
	for residentKiB(t, db) != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := residentKiB(t, db); got != 0 {
		t.Errorf("%d KiB of the mapped file still resident at rest, want 0", got)
	}
	if !dropped.Load() {
		t.Error("coming to rest did not drop the caches")
	}
	cancel()
	<-ended
	if got := target(); got != 50 {
		t.Fatalf("target %d after restGC ended, want 50", got)
	}
}

// residentKiB is how much of this process's mappings of the file at path
// is resident, from /proc/self/smaps.
func residentKiB(t *testing.T, path string) int {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	kib, ours := 0, false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			ours = len(f) >= 6 && f[5] == path
		case ours && len(f) >= 2 && f[0] == "Rss:":
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("smaps: %q", l)
			}
			kib += n
		}
	}
	return kib
}
