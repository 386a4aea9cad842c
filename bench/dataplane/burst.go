package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// burstSize and burstPath: ten requests of a second each, at once, to a
// revision at zero with containerConcurrency 1: ten instances are needed.
const (
	burstSize = 10
	burstPath = "/sleep?ms=1000"
)

// burstReport is the burst table: per round, knbox and the anchor.
type burstReport struct {
	rt          string
	knbox, hand []time.Duration
	peak        []int32 // instances knbox reached per round
	// rounds are the rounds without errors, side by side: on a shared
	// machine whose load changes from round to round, a round's ratio
	// says more than the ratio of the medians.
	rounds [][2]time.Duration // by hand, knbox
	errors int
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func (b *burstReport) print(w io.Writer) {
	fmt.Fprintf(w, "\nBurst: %d requests GET %s at once to a revision at zero (containerConcurrency 1,\n"+
		"target-utilization 100%%), sent -> the last answer complete; %d interleaved rounds, median.\n"+
		"Anchor: %d copies of the same bundle started at once by hand (`%s run --detach`, namespaces and bundles made\n"+
		"before the clock starts), each asked once as soon as it listens.\n\n", burstSize, burstPath, len(b.knbox), burstSize, b.rt)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "target\trounds\terrors\tmedian\tmin\tmax\tmedian / anchor\t\n")
	row := func(name string, ds []time.Duration, errs int) {
		if len(ds) == 0 {
			fmt.Fprintf(tw, "%s\t0\t%d\t-\t-\t-\t-\t\n", name, errs)
			return
		}
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t\n", name, len(ds), errs, ms(median(ds)), ms(s[0]), ms(s[len(s)-1]),
			ratio(float64(median(ds)), float64(median(b.hand))))
	}
	row(fmt.Sprintf("%d x %s run --detach by hand (anchor)", burstSize, b.rt), b.hand, 0)
	row(fmt.Sprintf("router -> %s, 0 -> %d", b.rt, burstSize), b.knbox, b.errors)
	tw.Flush()
	fmt.Fprintf(w, "instances knbox reached per round: %v\n", b.peak)
	fmt.Fprintf(w, "per round, by hand -> knbox:")
	for _, r := range b.rounds {
		fmt.Fprintf(w, "  %s -> %s (%s)", ms(r[0]), ms(r[1]), ratio(float64(r[1]), float64(r[0])))
	}
	fmt.Fprintln(w)
}

// burst measures the burst table for runtime rt in rounds interleaved
// with the anchor.
func (e *env) burst(ctx context.Context, rep *report, rt string, rounds int) error {
	anchorRev, stopAnchor, err := e.anchorService(ctx, "burst", rt)
	if err != nil {
		return fmt.Errorf("anchor service: %w", err)
	}
	defer stopAnchor()
	hand, err := e.newHandRunner(rt, anchorRev)
	if err != nil {
		return err
	}
	defer hand.close()
	name := "burst-" + rt
	if err := e.createService(ctx, name, rt, map[string]string{
		"autoscaling.knative.dev/initial-scale":                 "0",
		"autoscaling.knative.dev/target-utilization-percentage": "100",
	}, withConcurrency(1)); err != nil {
		return err
	}
	hosts, revs, err := e.waitReady(ctx, []string{name})
	defer func() {
		if err := e.deleteAndWait(context.WithoutCancel(ctx), map[string]string{name: revs[name]}); err != nil {
			logf("burst %s: %v", rt, err)
		}
	}()
	if err != nil {
		return err
	}
	br := &burstReport{rt: rt}
	for round := 0; round < rounds && ctx.Err() == nil; round++ {
		logf("burst %s: round %d: by hand", rt, round+1)
		hctx, hcancel := context.WithTimeout(ctx, 2*time.Minute)
		d, err := hand.parallel(hctx, burstSize, burstPath)
		hcancel()
		if err != nil {
			return fmt.Errorf("by hand: %w", err)
		}
		br.hand = append(br.hand, d)

		logf("burst %s: round %d: waiting for zero", rt, round+1)
		err = poll(ctx, 3*time.Minute, 100*time.Millisecond, name+" at zero", func() (bool, error) {
			reps, err := e.replicas(ctx)
			return err == nil && reps[revs[name]] == 0, err
		})
		if err != nil {
			return err
		}
		logf("burst %s: round %d: %d requests", rt, round+1, burstSize)
		var peak int32
		stopWatch := make(chan struct{})
		watched, err := e.watchPeak(ctx, revs[name], &peak, stopWatch)
		if err != nil {
			return err
		}
		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		failed := 0
		for range burstSize {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				if _, err := timedGet(rctx, e.router, "http://"+hosts[name]+burstPath); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					logf("burst %s: %v", rt, err)
				}
			}()
		}
		wg.Wait()
		d = time.Since(start)
		close(stopWatch)
		<-watched
		br.peak = append(br.peak, peak)
		if failed > 0 {
			br.errors += failed
			continue
		}
		br.knbox = append(br.knbox, d)
		br.rounds = append(br.rounds, [2]time.Duration{br.hand[len(br.hand)-1], d})
	}
	rep.bursts = append(rep.bursts, br)
	return nil
}

// watchPeak counts the Pods of revision rev as they come and go, from a
// watch (a list every few milliseconds would take the CPU of the machine
// under test, which the anchor does not pay), into *peak, the most at
// once, until stop is closed; watched is closed then.
func (e *env) watchPeak(ctx context.Context, rev string, peak *int32, stop <-chan struct{}) (watched <-chan struct{}, err error) {
	sel := "serving.knative.dev/revision=" + rev
	list, err := e.kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	w, err := e.kube.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, err
	}
	// Pods on their way out (a deletion timestamp: the last round's) are
	// not instances this round reached.
	pods := map[string]bool{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			pods[p.Name] = true
		}
	}
	*peak = int32(len(pods))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for {
			select {
			case <-stop:
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				p, isPod := ev.Object.(*corev1.Pod)
				if !isPod {
					continue
				}
				switch {
				case ev.Type == watch.Deleted || p.DeletionTimestamp != nil:
					delete(pods, p.Name)
				case ev.Type == watch.Added || ev.Type == watch.Modified:
					pods[p.Name] = true
				}
				if n := int32(len(pods)); n > *peak {
					*peak = n
				}
			}
		}
	}()
	return done, nil
}
