package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// BenchmarkStart measures, per handler, Create of a busybox "sleep 60"
// container until it runs, then its Delete (kill, wait, remove state). All
// iterations share one bundle with a read-only root, as instances of one
// Revision share an image. create-ms/op is the Create part alone.
func BenchmarkStart(b *testing.B) {
	for _, f := range handlerFactories {
		b.Run(f.name, func(b *testing.B) {
			requireRuntime(b, f.name)
			h := f.open(b, b.TempDir())
			bundle := newBundle(b, []string{"sleep", "60"}, func(s *specs.Spec) { s.Root.Readonly = true })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			var creating time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			n := 0
			for b.Loop() {
				t0 := time.Now()
				c, err := h.Create(ctx, fmt.Sprintf("bench-%d", n), bundle, IO{})
				if err != nil {
					b.Fatal(err)
				}
				creating += time.Since(t0)
				n++
				if err := c.Delete(ctx); err != nil {
					b.Cleanup(func() { _ = c.Delete(context.Background()) })
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(creating.Microseconds())/1000/float64(n), "create-ms/op")
		})
	}
}
