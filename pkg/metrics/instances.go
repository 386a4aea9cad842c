package metrics

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Instance is one instance (pod) as the instance metrics see it.
type Instance struct {
	ID, Namespace, Revision string
	Restarts                int
}

// Cgroups says where the instances' cgroups are: the pod runtime gives
// each container the cgroups path /<Parent>/<container id>, the main
// container's id being the pod's and a sidecar's "<name>_<pod id>".
type Cgroups struct {
	// Root is the cgroup filesystem's mount point; "" means /sys/fs/cgroup.
	Root string
	// Parent is the cgroup under which the containers' are; "" means knbox.
	Parent string
}

// sidecarSep separates a sidecar's name from its pod's id in a container id
// (package pod's convention).
const sidecarSep = "_"

var (
	instanceLabels = []string{"namespace", "pod", "container", labelRevision}
	cpuDesc        = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"Cumulative cpu time consumed in seconds (the container's cgroup; container is empty for an instance's main container).", instanceLabels, nil)
	memDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"Current working set in bytes: memory usage less inactive file cache (the container's cgroup).", instanceLabels, nil)
	restartsDesc = prometheus.NewDesc("kube_pod_container_status_restarts_total",
		"The number of container restarts per instance.", []string{"namespace", "pod", labelRevision}, nil)
	instancesDesc = prometheus.NewDesc("knbox_instances",
		"Instances per revision, ready or not.", revisionLabels, nil)
)

type instanceCollector struct {
	m         *Metrics
	instances func() []Instance
	cg        Cgroups
}

// AddInstances registers the instance metrics, read at each scrape from
// instances and from the cgroups cg says: cpu and memory per container,
// restarts and counts per instance. An instance that is gone is gone from
// them.
func (m *Metrics) AddInstances(instances func() []Instance, cg Cgroups) error {
	if cg.Root == "" {
		cg.Root = "/sys/fs/cgroup"
	}
	if cg.Parent == "" {
		cg.Parent = "knbox"
	}
	return m.reg.Register(instanceCollector{m, instances, cg})
}

func (c instanceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cpuDesc
	ch <- memDesc
	ch <- restartsDesc
	ch <- instancesDesc
}

func (c instanceCollector) Collect(ch chan<- prometheus.Metric) {
	insts := c.instances()
	byID := make(map[string]Instance, len(insts))
	counts := map[[2]string]int{}
	for _, in := range insts {
		byID[in.ID] = in
		counts[[2]string{in.Namespace, in.Revision}]++
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(in.Restarts), in.Namespace, in.ID, in.Revision)
	}
	for k, n := range counts {
		svc, cfg := c.m.labels(k[0], k[1])
		ch <- prometheus.MustNewConstMetric(instancesDesc, prometheus.GaugeValue, float64(n), k[0], svc, cfg, k[1])
	}
	if len(insts) == 0 {
		return
	}
	for _, u := range c.cg.usage() {
		pod, container := u.id, ""
		if name, id, ok := strings.Cut(u.id, sidecarSep); ok {
			pod, container = id, name
		}
		in, ok := byID[pod]
		if !ok {
			continue // not an instance of this knbox, or gone
		}
		if u.hasCPU {
			ch <- prometheus.MustNewConstMetric(cpuDesc, prometheus.CounterValue, u.cpu, in.Namespace, pod, container, in.Revision)
		}
		if u.hasMem {
			ch <- prometheus.MustNewConstMetric(memDesc, prometheus.GaugeValue, u.workingSet, in.Namespace, pod, container, in.Revision)
		}
	}
}

// usage is one container cgroup's usage.
type usage struct {
	id             string
	cpu            float64 // seconds
	workingSet     float64 // bytes
	hasCPU, hasMem bool
}

// maxCgroupFile bounds what is read of one cgroup file.
const maxCgroupFile = 64 << 10

// maxContainers bounds the cgroups read at one scrape.
const maxContainers = 4096

// usage reads the usage of every container cgroup under Parent, in cgroup
// v2 (unified) or v1 layout.
func (cg Cgroups) usage() []usage {
	if _, err := os.Stat(filepath.Join(cg.Root, "cgroup.controllers")); err == nil {
		return cg.usageV2()
	}
	return cg.usageV1()
}

func (cg Cgroups) usageV1() []usage {
	memDir := filepath.Join(cg.Root, "memory", cg.Parent)
	cpuDir := filepath.Join(cg.Root, "cpuacct", cg.Parent)
	ids := map[string]bool{}
	for _, d := range []string{memDir, cpuDir} {
		for _, id := range subdirs(d) {
			ids[id] = true
		}
	}
	out := make([]usage, 0, len(ids))
	for id := range ids {
		u := usage{id: id}
		if b, err := readSmall(filepath.Join(cpuDir, id, "cpuacct.usage")); err == nil {
			if ns, ok := parseUint(b); ok {
				u.cpu, u.hasCPU = float64(ns)/1e9, true
			}
		}
		u.workingSet, u.hasMem = workingSet(filepath.Join(memDir, id, "memory.usage_in_bytes"), filepath.Join(memDir, id, "memory.stat"), "total_inactive_file")
		out = append(out, u)
	}
	return out
}

func (cg Cgroups) usageV2() []usage {
	dir := filepath.Join(cg.Root, cg.Parent)
	ids := subdirs(dir)
	out := make([]usage, 0, len(ids))
	for _, id := range ids {
		u := usage{id: id}
		if b, err := readSmall(filepath.Join(dir, id, "cpu.stat")); err == nil {
			if us, ok := parseFlatKeyed(b, "usage_usec"); ok {
				u.cpu, u.hasCPU = float64(us)/1e6, true
			}
		}
		u.workingSet, u.hasMem = workingSet(filepath.Join(dir, id, "memory.current"), filepath.Join(dir, id, "memory.stat"), "inactive_file")
		out = append(out, u)
	}
	return out
}

// workingSet is cAdvisor's: usage less inactive file pages, at least 0.
func workingSet(usageFile, statFile, inactiveKey string) (float64, bool) {
	b, err := readSmall(usageFile)
	if err != nil {
		return 0, false
	}
	used, ok := parseUint(b)
	if !ok {
		return 0, false
	}
	if b, err := readSmall(statFile); err == nil {
		if inactive, ok := parseFlatKeyed(b, inactiveKey); ok {
			if inactive > used {
				return 0, true
			}
			used -= inactive
		}
	}
	return float64(used), true
}

// subdirs lists the directories in dir (at most maxContainers).
func subdirs(dir string) []string {
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	es, _ := f.ReadDir(maxContainers)
	var out []string
	for _, e := range es {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCgroupFile))
	if err != nil {
		return nil, err
	}
	if len(b) == maxCgroupFile {
		return nil, errors.New("cgroup file too large")
	}
	return b, nil
}

// parseUint parses a cgroup file holding one unsigned number ("max" is
// not one).
func parseUint(b []byte) (uint64, bool) {
	n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, false // out of range: ParseUint's answer is the maximum
	}
	return n, true
}

// parseFlatKeyed finds key in a cgroup flat-keyed file ("key value" per
// line: memory.stat, cpu.stat).
func parseFlatKeyed(b []byte, key string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 256), maxCgroupFile)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			return parseUint([]byte(v))
		}
	}
	return 0, false
}
