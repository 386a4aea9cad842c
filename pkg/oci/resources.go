package oci

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	// cpuPeriod is the CFS period in µs, Kubernetes' default.
	cpuPeriod = 100000
	// minQuota is the smallest CFS quota in µs the kernel accepts.
	minQuota = 1000
	// minShares and maxShares bound cpu.shares (Kubernetes' and the kernel's).
	minShares = 2
	maxShares = 262144
	// defaultPidsLimit is the pids cgroup limit unless the operator sets one.
	defaultPidsLimit = 4096
	// maxCPUMilli bounds limits.cpu (a million cores) so the quota cannot overflow.
	maxCPUMilli = 1 << 30
)

// DefaultOpenFiles is RLIMIT_NOFILE unless the operator's policy sets it.
const DefaultOpenFiles = 1 << 20

// rlimits: see the package documentation.
func rlimits(openFiles uint64) []specs.POSIXRlimit {
	if openFiles == 0 {
		openFiles = DefaultOpenFiles
	}
	return []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Soft: openFiles, Hard: openFiles},
		{Type: "RLIMIT_CORE", Soft: 0, Hard: 0},
	}
}

// quantity returns the request and limit of a resource; the request is the
// limit when only a limit is set,
// as Kubernetes' defaulting does.
func quantity(r corev1.ResourceRequirements, name corev1.ResourceName) (req, limit *resource.Quantity) {
	if q, ok := r.Limits[name]; ok {
		limit = &q
	}
	if q, ok := r.Requests[name]; ok {
		req = &q
	} else {
		req = limit
	}
	return req, limit
}

func resources(r corev1.ResourceRequirements, pids int64) (*specs.LinuxResources, error) {
	res := &specs.LinuxResources{
		// Deny every device; the runtime adds its default devices.
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}

	memReq, memLimit := quantity(r, corev1.ResourceMemory)
	if memReq != nil && memReq.Sign() < 0 {
		return nil, fieldErr("resources.requests.memory", "%s is negative", memReq)
	}
	if memLimit != nil {
		if memLimit.Sign() <= 0 {
			return nil, fieldErr("resources.limits.memory", "%s is not positive", memLimit)
		}
		limit := memLimit.Value()
		swap := limit // memory+swap = memory: no swap
		res.Memory = &specs.LinuxMemory{Limit: &limit, Swap: &swap}
	}

	cpuReq, cpuLimit := quantity(r, corev1.ResourceCPU)
	shares := uint64(minShares)
	if cpuReq != nil {
		if cpuReq.Sign() < 0 {
			return nil, fieldErr("resources.requests.cpu", "%s is negative", cpuReq)
		}
		milli := min(cpuReq.MilliValue(), maxShares) // beyond maxShares cores shares saturate anyway
		shares = max(minShares, min(maxShares, uint64(milli)*1024/1000))
	}
	res.CPU = &specs.LinuxCPU{Shares: &shares}
	if cpuLimit != nil {
		if cpuLimit.Sign() <= 0 {
			return nil, fieldErr("resources.limits.cpu", "%s is not positive", cpuLimit)
		}
		if cpuLimit.MilliValue() > maxCPUMilli {
			return nil, fieldErr("resources.limits.cpu", "%s is more CPU than any machine has", cpuLimit)
		}
		quota := max(minQuota, cpuLimit.MilliValue()*cpuPeriod/1000)
		period := uint64(cpuPeriod)
		res.CPU.Quota, res.CPU.Period = &quota, &period
	}

	if pids == 0 {
		pids = defaultPidsLimit
	}
	if pids > 0 { // negative: unlimited
		res.Pids = &specs.LinuxPids{Limit: &pids}
	}
	return res, nil
}

// oomScoreAdj: see the package documentation.
func oomScoreAdj(r corev1.ResourceRequirements, machine int64) int {
	req, limit := quantity(r, corev1.ResourceMemory)
	if req == nil && limit == nil {
		return 1000
	}
	if req == nil || machine <= 0 {
		return 999
	}
	if req.Value() >= machine {
		return 2
	}
	score := 1000 - 1000*req.Value()/machine
	return int(max(2, min(999, score)))
}

// MaxOpenFiles returns the largest RLIMIT_NOFILE that a runtime started by
// this process can give a container: the kernel's fs.nr_open with
// CAP_SYS_RESOURCE, else this process's own hard limit (a runtime without
// that capability cannot raise a hard limit, and fails to start a container
// whose spec asks for more). A daemon sets Policy.OpenFiles to
// min(DefaultOpenFiles, MaxOpenFiles()) once at start.
func MaxOpenFiles() uint64 {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return DefaultOpenFiles
	}
	if hasCapability(unix.CAP_SYS_RESOURCE) {
		if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
				return n
			}
		}
	}
	return l.Max
}

// hasCapability reports whether this process has capability c effective.
func hasCapability(c int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<uint(c)) != 0
		}
	}
	return false
}
