package replicas

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/network/networktest"
	"github.com/knbox/knbox/pkg/pod"
)

// BenchmarkStart measures an instance's start, from Ensure of a new
// revision (image cached) to its first instance passing the readiness
// probe: the pod spec, network namespace, overlay mount, bundle, the
// runtime's create and the server's start. Stopping it is not timed. It
// reports the median and the 95th percentile besides the mean (ns/op).
// runc_egress is runc with egress on: the instance's namespace is also
// attached to a bridge (CNI ADD) before the container starts.
func BenchmarkStart(b *testing.B) {
	for _, h := range []string{"process", "runc", "runsc"} {
		b.Run(h, func(b *testing.B) { benchStart(b, h) })
	}
	b.Run("runc_egress", func(b *testing.B) { benchStart(b, "runc", withTestEgress(b)) })
}

func benchStart(b *testing.B, h string, opts ...envOption) {
	requireHandler(b, h)
	ref := runtimeInfoImage(b)
	e := newEnv(b, []string{h}, opts...)
	changed := make(chan struct{}, 1)
	e.m.Subscribe(func(string, string) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	// Pull once, outside the measurement.
	warm := newRev(b, "bench", "warm-"+h, h, ref)
	e.resolveAndEnsure(warm)
	e.waitState(warm, time.Minute, "warm ready", ready)
	digest := warm.Status.ContainerStatuses[0].ImageDigest
	ctx := context.Background()
	go e.drainAll(ctx)
	if err := e.m.Remove(ctx, "bench", warm.Name); err != nil {
		b.Fatal(err)
	}

	var took []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		rev := newRev(b, "bench", fmt.Sprintf("start-%s-%d", h, i), h, ref)
		rev.Status.ContainerStatuses = []servingv1.ContainerStatus{{ImageDigest: digest}}
		b.StartTimer()
		start := time.Now()
		deadline := time.NewTimer(time.Minute)
		for {
			st, err := e.m.Ensure(ctx, rev)
			if err != nil {
				b.Fatal(err)
			}
			if st.Ready {
				break
			}
			if st.Failed {
				b.Fatalf("start failed: %+v", st)
			}
			select {
			case <-changed:
			case <-deadline.C:
				b.Fatalf("not ready within a minute: %+v", st)
			}
		}
		took = append(took, time.Since(start))
		b.StopTimer()
		deadline.Stop()
		if err := e.m.Remove(ctx, "bench", rev.Name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	slices.Sort(took)
	if n := len(took); n > 0 {
		b.ReportMetric(float64(took[n/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(took[(n*95)/100].Microseconds())/1000, "p95-ms")
	}
}

// withTestEgress turns egress on with a network of the test's own
// (networktest), removed at the end.
func withTestEgress(t testing.TB) envOption {
	t.Helper()
	networktest.RequireCNI(t)
	eg := networktest.NewNet(t, "kbi").Egress(t)
	return withPodOptions(func(o *pod.Options) { o.Egress = eg })
}
