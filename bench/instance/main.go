// Command instance reports how long an instance takes to start, from the
// runtime's create to the first ready probe, per handler (runc, runsc),
// next to the process handler (a plain child process: the cost of
// everything but the OCI runtime) measured in the same run, and runc with
// egress on (runc_egress: the namespace is attached to a bridge by the CNI
// plugins before the container starts). It runs
// pkg/replicas's BenchmarkStart, which starts real containers from a cached
// image, and prints one table. Run: go run ./bench/instance [-n 30]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"text/tabwriter"
)

type row struct {
	handler        string
	mean, p50, p95 float64 // milliseconds
}

// BenchmarkStart/runc-2   30   70123456 ns/op   67.00 p50-ms   89.00 p95-ms ...
var line = regexp.MustCompile(`^BenchmarkStart/(\w+)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op.*?([\d.]+) p50-ms\s+([\d.]+) p95-ms`)

func main() {
	n := flag.Int("n", 30, "starts per handler (bounded)")
	flag.Parse()
	if *n < 5 || *n > 500 {
		fmt.Fprintln(os.Stderr, "-n must be within 5..500")
		os.Exit(2)
	}
	cmd := exec.Command("go", "test", "-run=NONE", "-bench=^BenchmarkStart$", "-benchtime="+strconv.Itoa(*n)+"x", "-benchmem", "github.com/knbox/knbox/pkg/replicas")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		os.Stderr.Write(out.Bytes())
		fmt.Fprintln(os.Stderr, "benchmark failed:", err)
		os.Exit(1)
	}
	rows := map[string]row{}
	var order []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		p50, _ := strconv.ParseFloat(m[3], 64)
		p95, _ := strconv.ParseFloat(m[4], 64)
		rows[m[1]] = row{handler: m[1], mean: ns / 1e6, p50: p50, p95: p95}
		order = append(order, m[1])
	}
	base, ok := rows["process"]
	if !ok || base.p50 == 0 {
		os.Stderr.Write(out.Bytes())
		fmt.Fprintln(os.Stderr, "no process baseline in the benchmark output")
		os.Exit(1)
	}
	fmt.Printf("Instance start (Ensure of a new revision to its first ready instance, image cached), %d per handler\n", *n)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "handler\tmean\tp50\tp95\tp50 / process\t\n")
	for _, h := range order {
		r := rows[h]
		label := h
		if h == "process" {
			label = "process (baseline)"
		}
		fmt.Fprintf(w, "%s\t%.1fms\t%.1fms\t%.1fms\t%.2fx\t\n", label, r.mean, r.p50, r.p95, r.p50/base.p50)
	}
	w.Flush()
}
