package e2e

// The Knative runtime contract, each point a check (issue 4, "The runtime
// contract, each point a test"), end to end: Services applied with
// kubectl, containers run by knbox under RuntimeClass runc and runsc, and
// the runtime-info image (test/images/runtime-info) reporting through
// knbox's router what it sees. A check that fails is a point of the
// contract knbox does not keep yet: the assertions say what the contract
// wants, not what knbox does today.
//
// One knbox serve runs every Service of TestRuntimeContract; the Services are
// applied up front and the checks run as parallel subtests, so that the
// containers start side by side. TestRuntimeContractDeploymentProbe has its
// own knbox serve, with a short progress deadline.

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// Resources of the info Service: limits memory and cpu, requests cpu.
const (
	infoMemoryLimit = 256 << 20 // bytes, "256Mi"
	infoCPUQuota    = 50000     // µs per 100000 µs period, "500m"
	infoCPUShares   = 256       // requests "250m": 250 × 1024 / 1000
	oomMemoryLimit  = 64 << 20  // bytes, "64Mi"
	ctCustomPort    = 9000
)

// The info Service's command, args and workingDir (the image's are
// ["/app"], none and "/").
var (
	infoCommand    = []string{"/app"}
	infoArgs       = []string{"--flag=1", "two words", "$literal", "ünïcode"}
	infoWorkingDir = "/tmp"
)

// ctDefaultCapabilities is knbox's default capability set, NET_BIND_SERVICE
// alone (the "restricted" Pod Security profile's effect): a container's
// bounding and effective sets must not exceed it.
const ctDefaultCapabilities = 0x0000000000000400

// roStartup is the ro Service's shell script: what it prints lands in the
// logs, where the hardening checks read it.
const roStartup = `cat /proc/self/status
echo contract >/proc/sys/kernel/domainname && echo sysctl-write=allowed || echo sysctl-write=refused
echo startup-done
exec /app`

// ctHostFirmware lists the entries of the host's /sys/firmware, a masked
// path: none may be visible in a container.
func ctHostFirmware() []string {
	var out []string
	ents, _ := os.ReadDir("/sys/firmware")
	for _, ent := range ents {
		out = append(out, "/sys/firmware/"+ent.Name())
	}
	return out
}

// contractServices are the Services of TestRuntimeContract for runtime
// class rc.
func (e *contractEnv) contractServices(rc string) []*servingv1.Service {
	ro := true
	uid, gid := int64(65532), int64(65533)
	infoVolumes := []corev1.Volume{
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: contractSecret}}},
		{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: contractConfigMap}}}},
		{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: contractSecret},
				Items: []corev1.KeyToPath{{Key: "user", Path: "proj-user"}}}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: contractConfigMap},
				Items: []corev1.KeyToPath{{Key: "color", Path: "sub/proj-color"}}}},
		}}}},
	}
	info := corev1.Container{
		Image:      e.infoRef,
		Command:    infoCommand,
		Args:       infoArgs,
		WorkingDir: infoWorkingDir,
		Env: []corev1.EnvVar{
			{Name: "FROM_VALUE", Value: "plain value"},
			{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: contractSecret}, Key: "user"}}},
			{Name: "FROM_CONFIGMAP", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: contractConfigMap}, Key: "greeting"}}},
		},
		EnvFrom: []corev1.EnvFromSource{
			{Prefix: "S_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: contractSecret}}},
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: contractConfigMap}}},
		},
		Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi"), corev1.ResourceCPU: resource.MustParse("500m")},
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi"), corev1.ResourceCPU: resource.MustParse("250m")},
		},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "sec", MountPath: "/etc/contract/secret", ReadOnly: true},
			{Name: "cfg", MountPath: "/etc/contract/config", ReadOnly: true},
			{Name: "proj", MountPath: "/etc/contract/projected", ReadOnly: true},
		},
	}
	return []*servingv1.Service{
		contractService("info", rc, info, infoVolumes...),
		// A read-only root, a custom port, and the toolbox's shell printing
		// /proc/self/status and trying a sysctl write (as root) before it
		// execs runtime-info.
		contractService("ro", rc, corev1.Container{
			Image:           e.toolRef,
			Command:         []string{"/bin/sh", "-c", roStartup},
			Ports:           []corev1.ContainerPort{{ContainerPort: ctCustomPort}},
			SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: &ro},
		}),
		contractService("user", rc, corev1.Container{
			Image:           e.infoRef,
			SecurityContext: &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &gid},
		}),
		contractService("imguser", rc, corev1.Container{Image: e.userRef}),
		contractService("logs", rc, corev1.Container{Image: e.infoRef}),
		contractService("exit", rc, corev1.Container{Image: e.infoRef}),
		contractService("live", rc, corev1.Container{
			Image: e.infoRef,
			LivenessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}},
				PeriodSeconds: 1, FailureThreshold: 2,
			},
		}),
		contractService("oom", rc, corev1.Container{
			Image: e.infoRef,
			Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
			},
		}),
		contractService("crash", rc, corev1.Container{
			Image:   e.toolRef,
			Command: []string{"/bin/sh", "-c", "echo crash-output; echo crash-termination-message >/dev/termination-log; exit 3"},
		}),
	}
}

// TestRuntimeContract checks the Knative runtime contract point by point,
// for RuntimeClass runc and runsc.
func TestRuntimeContract(t *testing.T) {
	e := newContractEnv(t)
	applied := time.Now() // before any Service is applied
	for _, rc := range contractRuntimeClasses {
		for _, svc := range e.contractServices(rc) {
			e.apply(t, svc)
		}
	}
	hostname, _ := os.Hostname()
	for _, rc := range contractRuntimeClasses {
		t.Run(rc, func(t *testing.T) {
			t.Parallel()
			t.Run("info", func(t *testing.T) {
				t.Parallel()
				e.checkInfo(t, rc, hostname)
			})
			t.Run("ro", func(t *testing.T) {
				t.Parallel()
				e.checkReadOnlyRoot(t, rc)
			})
			t.Run("user", func(t *testing.T) {
				t.Parallel()
				e.checkRunAsUser(t, rc)
			})
			t.Run("imguser", func(t *testing.T) {
				t.Parallel()
				e.checkImageUser(t, rc)
			})
			t.Run("logs", func(t *testing.T) {
				t.Parallel()
				e.checkLogs(t, rc)
			})
			t.Run("exit", func(t *testing.T) {
				t.Parallel()
				e.checkExit(t, rc)
			})
			t.Run("liveness", func(t *testing.T) {
				t.Parallel()
				e.checkLiveness(t, rc)
			})
			t.Run("oom", func(t *testing.T) {
				t.Parallel()
				e.checkOOM(t, rc)
			})
			t.Run("crash", func(t *testing.T) {
				t.Parallel()
				e.checkCrash(t, rc, applied)
			})
			t.Run("exec-probe-refused", func(t *testing.T) {
				t.Parallel()
				e.checkExecProbeRefused(t, rc)
			})
		})
	}
}

// checkInfo runs the checks on the info Service: environment, stdin,
// filesystems, devices, cgroup limits, command/args/workingDir, root as
// the default user, hardening visible from runtime-info, and volumes.
func (e *contractEnv) checkInfo(t *testing.T, rc, hostname string) {
	svc := "info-" + rc
	e.waitReady(t, svc)
	paths := []string{"/", "/proc/sys/kernel/hostname", "/proc/kcore", "/proc/keys", "/proc/timer_list",
		"/etc/contract/secret/user", "/etc/contract/secret/token", "/etc/contract/config/greeting", "/etc/contract/config/color",
		"/etc/contract/projected/proj-user", "/etc/contract/projected/sub/proj-color", "/etc/contract/secret"}
	firmware := ctHostFirmware()
	info := e.info(t, svc, append(paths, firmware...)...)
	t.Run("env", func(t *testing.T) {
		want := map[string]string{
			"PORT": "8080", "K_SERVICE": svc, "K_CONFIGURATION": svc, "K_REVISION": svc + "-00001",
			"FROM_VALUE": "plain value", "FROM_SECRET": "alice", "FROM_CONFIGMAP": "hello",
			"S_user": "alice", "S_token": "s3cr3t-token", "greeting": "hello", "color": "blue",
		}
		ctCheckEnv(t, info, want)
	})
	t.Run("stdin-eof", func(t *testing.T) { ctCheckStdin(t, info) })
	t.Run("filesystems", func(t *testing.T) { ctCheckFilesystems(t, info) })
	t.Run("etc-files", func(t *testing.T) { ctCheckEtcFiles(t, info) })
	t.Run("dev", func(t *testing.T) { ctCheckDev(t, info) })
	t.Run("proc-sys-read-only", func(t *testing.T) { ctCheckProcSysReadOnly(t, rc, info) })
	t.Run("masked-paths", func(t *testing.T) { ctCheckMaskedPaths(t, info, firmware) })
	t.Run("namespaces", func(t *testing.T) {
		if info.PID != 1 {
			t.Errorf("runtime-info's pid is %d, want 1 (the container's own pid namespace)", info.PID)
		}
		if info.Hostname == "" || info.Hostname == hostname {
			t.Errorf("hostname %q inside, host's %q: want the container's own UTS namespace", info.Hostname, hostname)
		}
	})
	t.Run("cgroup-limits", func(t *testing.T) { ctCheckCgroupLimitsFor(t, rc, info, infoMemoryLimit, true) })
	t.Run("command-args-workingdir", func(t *testing.T) {
		want := append(slices.Clone(infoCommand), infoArgs...)
		if !slices.Equal(info.Args, want) {
			t.Errorf("args %q, want %q", info.Args, want)
		}
		if info.Cwd != infoWorkingDir {
			t.Errorf("cwd %q, want workingDir %q", info.Cwd, infoWorkingDir)
		}
	})
	t.Run("default-user-root-writable-rootfs", func(t *testing.T) {
		if info.UID != 0 || info.GID != 0 {
			t.Errorf("uid/gid %d/%d, want 0/0 (no runAsUser, no USER in the image)", info.UID, info.GID)
		}
		if f := info.file(t, "/"); !f.Writable {
			t.Errorf("/ not writable without readOnlyRootFilesystem: %s", f)
		}
	})
	t.Run("volumes", func(t *testing.T) { ctCheckVolumes(t, info) })
}

func ctCheckEnv(t *testing.T, info *ctInfo, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, ok := info.Env[k]; !ok || got != v {
			t.Errorf("env %s=%q (set: %v), want %q", k, got, ok, v)
		}
	}
	if t.Failed() {
		t.Logf("environment: %v", info.Env)
	}
}

func ctCheckStdin(t *testing.T, info *ctInfo) {
	t.Helper()
	if !info.StdinEOF {
		t.Errorf("stdin did not read EOF at once: %s", info.StdinDetail)
	}
}

// ctCheckFilesystems: /tmp a read-write tmpfs for any uid, /var/log writable.
func ctCheckFilesystems(t *testing.T, info *ctInfo) {
	tmp := info.file(t, "/tmp")
	if tmp.Type != "dir" || !tmp.Writable || tmp.Perm != "1777" {
		t.Errorf("/tmp: want a writable dir with mode 1777: %s", tmp)
	}
	if m, ok := info.mount("/tmp"); !ok || m.FSType != "tmpfs" || m.readOnly() {
		t.Errorf("/tmp: want a read-write tmpfs mount, got %+v (found %v)\nmounts:\n%s", m, ok, info.mountsString())
	}
	if f := info.file(t, "/var/log"); f.Type != "dir" || !f.Writable {
		t.Errorf("/var/log: want a writable dir: %s", f)
	}
}

func ctCheckEtcFiles(t *testing.T, info *ctInfo) {
	for _, p := range []string{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf"} {
		if f := info.file(t, p); !f.Exists || f.Type != "file" {
			t.Errorf("%s: want a file: %s", p, f)
		}
	}
}

// ctCheckDev: /dev/log a writable socket, the OCI /dev links and default
// devices, no /dev/console.
func ctCheckDev(t *testing.T, info *ctInfo) {
	if f := info.file(t, "/dev/log"); f.Type != "socket" || !f.Writable {
		t.Errorf("/dev/log: want a writable socket: %s", f)
	}
	for p, target := range map[string]string{
		"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0", "/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2",
	} {
		if f := info.file(t, p); f.Type != "symlink" || f.Link != target {
			t.Errorf("%s: want a link to %s: %s", p, target, f)
		}
	}
	for _, p := range []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"} {
		if f := info.file(t, p); f.Type != "chardev" {
			t.Errorf("%s: want a character device: %s", p, f)
		}
	}
	for _, p := range []string{"/dev/null", "/dev/zero", "/dev/full"} {
		if f := info.file(t, p); !f.Writable {
			t.Errorf("%s: want writable: %s", p, f)
		}
	}
	if f := info.file(t, "/dev/console"); f.Exists {
		t.Errorf("/dev/console exists (no terminal, so there must be none): %s", f)
	}
}

// ctCheckProcSysReadOnly: /proc/sys is read-only; even root cannot write a
// sysctl. With runc it is a read-only mount (the spec's readonlyPaths);
// gVisor's mountinfo is its own, so there only writability is checked.
func ctCheckProcSysReadOnly(t *testing.T, rc string, info *ctInfo) {
	if m, ok := info.mount("/proc/sys"); rc == "runc" && (!ok || !m.readOnly()) {
		t.Errorf("/proc/sys: want a read-only mount, got %+v (found %v)\nmounts:\n%s", m, ok, info.mountsString())
	}
	if rc == "runsc" {
		// gVisor 20221219 (Debian 12) implements neither readonlyPaths nor
		// maskedPaths (google/gvisor#9245): access(2) says /proc/sys is
		// writable, yet writes are refused (EPERM), which
		// ro/sysctl-write-refused checks. Known gap, in the README.
		return
	}
	for _, p := range []string{"/proc/sys", "/proc/sys/kernel/hostname"} {
		if f := info.file(t, p); f.Writable {
			t.Errorf("%s writable by root inside the container: %s", p, f)
		}
	}
}

// ctCheckMaskedPaths: the operator's masked paths hide what they mask:
// files are /dev/null (or absent), and what the host has in a masked
// directory (/sys/firmware) is not visible.
func ctCheckMaskedPaths(t *testing.T, info *ctInfo, firmware []string) {
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list"} {
		if f := info.file(t, p); f.Exists && f.Type != "chardev" {
			t.Errorf("%s not masked (want absent or /dev/null): %s", p, f)
		}
	}
	for _, p := range firmware {
		if f := info.file(t, p); f.Exists {
			t.Errorf("%s (masked /sys/firmware) visible in the container: %s", p, f)
		}
	}
}

// ctCheckCgroupLimitsFor is ctCheckCgroupLimits under runtime class rc.
// runsc's handler bind-mounts the sandbox's host cgroups read-only at
// /sys/fs/cgroup/<controller> (gVisor 20221219 shows none of its own: see
// package runtime), so the limits read the same as with runc. What gVisor
// still does not give is a cgroup view of the container's own:
// /proc/self/cgroup is empty and the mounts are 9p, not cgroupfs; programs
// that find their cgroup through those (the JVM, Go's automaxprocs) see no
// limits. That difference is asserted, so that this fails once a runsc shows
// more, and the README's gVisor bullet can be updated.
func ctCheckCgroupLimitsFor(t *testing.T, rc string, info *ctInfo, memLimit int64, cpu bool) {
	ctCheckCgroupLimits(t, info, memLimit, cpu)
	if rc != "runsc" {
		return
	}
	if info.Cgroup.Path != "" {
		t.Errorf("runsc: /proc/self/cgroup names a cgroup (%q): the container has a cgroup view of its own now; update README and package runtime", info.Cgroup.Path)
	}
	for _, mp := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu"} {
		if m, ok := info.mount(mp); !ok || m.FSType == "cgroup" {
			t.Errorf("runsc: %s: %+v (found %v), want the handler's bind mount (9p)\nmounts:\n%s", mp, m, ok, info.mountsString())
		}
	}
}

// ctCheckCgroupLimits: the memory limit (and with cpu the quota, period and
// shares of the info Service) in the container's own cgroup files, none
// of them writable.
func ctCheckCgroupLimits(t *testing.T, info *ctInfo, memLimit int64, cpu bool) {
	c := info.Cgroup
	defer func() {
		if t.Failed() {
			b, _ := json.MarshalIndent(c, "", "  ")
			t.Logf("runtime-info cgroup report:\n%s", b)
		}
	}()
	if c.Version == 0 {
		t.Fatalf("no cgroup files visible in the container")
	}
	if c.MemoryLimit == nil || *c.MemoryLimit != memLimit {
		t.Errorf("memory limit %v, want %d bytes", ctPtrString(c.MemoryLimit), memLimit)
	}
	if cpu {
		if c.CPUQuota == nil || *c.CPUQuota != infoCPUQuota || c.CPUPeriod != 100000 {
			t.Errorf("cpu quota/period %s/%d, want %d/100000", ctPtrString(c.CPUQuota), c.CPUPeriod, infoCPUQuota)
		}
		if c.Version == 2 {
			if want := int64(1 + ((infoCPUShares-2)*9999)/262142); c.CPUWeight != want {
				t.Errorf("cpu.weight %d, want %d (shares %d)", c.CPUWeight, want, infoCPUShares)
			}
		} else if c.CPUShares != infoCPUShares {
			t.Errorf("cpu.shares %d, want %d (requests.cpu 250m)", c.CPUShares, infoCPUShares)
		}
	}
	if len(c.Files) == 0 {
		t.Errorf("no cgroup control files read")
	}
	for _, f := range c.Files {
		if f.Error != "" {
			t.Errorf("cgroup file %s: %s", f.Path, f.Error)
		}
		if f.Writable {
			t.Errorf("cgroup file %s (%s) is writable from inside the container", f.Path, f.Value)
		}
	}
}

func ctPtrString(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10)
}

// ctCheckVolumes: Secret, ConfigMap and projected volumes where volumeMounts
// say, read-only, with the keys as files.
func ctCheckVolumes(t *testing.T, info *ctInfo) {
	for p, value := range map[string]string{
		"/etc/contract/secret/user":              contractSecretData["user"],
		"/etc/contract/secret/token":             contractSecretData["token"],
		"/etc/contract/config/greeting":          contractConfigMapData["greeting"],
		"/etc/contract/config/color":             contractConfigMapData["color"],
		"/etc/contract/projected/proj-user":      contractSecretData["user"],
		"/etc/contract/projected/sub/proj-color": contractConfigMapData["color"],
	} {
		f := info.file(t, p)
		switch {
		case !f.Exists:
			t.Errorf("%s missing: %s", p, f)
		case f.Writable:
			t.Errorf("%s writable (want a read-only volume): %s", p, f)
		case f.Type == "file" && f.Size != int64(len(value)):
			t.Errorf("%s has %d bytes, want %d (%q): %s", p, f.Size, len(value), value, f)
		case f.Type != "file" && f.Type != "symlink":
			t.Errorf("%s: want a file: %s", p, f)
		}
	}
	for _, mp := range []string{"/etc/contract/secret", "/etc/contract/config", "/etc/contract/projected"} {
		if m, ok := info.mount(mp); !ok || !m.readOnly() {
			t.Errorf("%s: want a read-only mount, got %+v (found %v)\nmounts:\n%s", mp, m, ok, info.mountsString())
		}
	}
	if f := info.file(t, "/etc/contract/secret"); f.Writable {
		t.Errorf("/etc/contract/secret writable: %s", f)
	}
}

// checkReadOnlyRoot: readOnlyRootFilesystem (/ not writable, /tmp still
// is), a custom containerPort as PORT, and the hardening that
// /proc/self/status shows (printed by the shell before it execs
// runtime-info).
func (e *contractEnv) checkReadOnlyRoot(t *testing.T, rc string) {
	svc := "ro-" + rc
	e.waitReady(t, svc)
	info := e.info(t, svc, "/", "/etc", "/tmp")
	t.Run("readonly-rootfs", func(t *testing.T) {
		if f := info.file(t, "/"); f.Writable {
			t.Errorf("/ writable by root with readOnlyRootFilesystem: %s", f)
		}
		if f := info.file(t, "/etc"); f.Writable {
			t.Errorf("/etc writable by root with readOnlyRootFilesystem: %s", f)
		}
		if m, ok := info.mount("/"); !ok || !m.readOnly() {
			t.Errorf("/: want a read-only mount, got %+v (found %v)\nmounts:\n%s", m, ok, info.mountsString())
		}
		ctCheckFilesystems(t, info)
	})
	t.Run("custom-port", func(t *testing.T) {
		ctCheckEnv(t, info, map[string]string{"PORT": strconv.Itoa(ctCustomPort), "K_REVISION": svc + "-00001"})
	})
	startup := e.waitLogs(t, 1, "startup-done", svc)
	t.Run("hardening", func(t *testing.T) {
		ctCheckHardening(t, rc, ctProcStatus(startup))
	})
	t.Run("sysctl-write-refused", func(t *testing.T) {
		for _, l := range strings.Split(startup, "\n") {
			if strings.Contains(l, "domainname") || strings.Contains(l, "sysctl-write") {
				t.Logf("%s: %s", rc, l)
			}
		}
		if !strings.Contains(startup, "sysctl-write=refused") {
			t.Errorf("root wrote /proc/sys/kernel/domainname (/proc/sys must be read-only); the shell's output:\n%s", startup)
		}
	})
}

// ctCheckHardening: no new privileges, seccomp filtering, at most the default
// capabilities.
func ctCheckHardening(t *testing.T, rc string, status map[string]string) {
	t.Logf("%s /proc/self/status: %v", rc, status)
	capEff, err := strconv.ParseUint(status["CapEff"], 16, 64)
	if err != nil {
		t.Errorf("CapEff %q: %v", status["CapEff"], err)
	} else if extra := capEff &^ ctDefaultCapabilities; extra != 0 {
		t.Errorf("CapEff %016x has capabilities beyond the default set %016x: %016x", capEff, uint64(ctDefaultCapabilities), extra)
	}
	if bnd, err := strconv.ParseUint(status["CapBnd"], 16, 64); err == nil && bnd&^ctDefaultCapabilities != 0 {
		t.Errorf("CapBnd %016x has capabilities beyond the default set: %016x", bnd, bnd&^ctDefaultCapabilities)
	}
	// gVisor's /proc/self/status has no NoNewPrivs line: there the
	// check is that it is not 0.
	if nnp, ok := status["NoNewPrivs"]; (ok || rc == "runc") && nnp != "1" {
		t.Errorf("NoNewPrivs %q, want 1", nnp)
	}
	if status["Seccomp"] != "2" {
		t.Errorf("Seccomp %q, want 2 (filter mode)", status["Seccomp"])
	}
}

// checkRunAsUser: runAsUser/runAsGroup honoured; /tmp, /var/log and
// /dev/log usable by that uid.
func (e *contractEnv) checkRunAsUser(t *testing.T, rc string) {
	svc := "user-" + rc
	e.waitReady(t, svc)
	info := e.info(t, svc)
	if info.UID != 65532 || info.EUID != 65532 || info.GID != 65533 || info.EGID != 65533 {
		t.Errorf("uid/euid/gid/egid %d/%d/%d/%d, want 65532/65532/65533/65533 (runAsUser/runAsGroup)", info.UID, info.EUID, info.GID, info.EGID)
	}
	ctCheckFilesystems(t, info)
	if f := info.file(t, "/dev/log"); f.Type != "socket" || !f.Writable {
		t.Errorf("/dev/log not a socket writable by uid 65532: %s", f)
	}
	var res map[string]string
	if err := json.Unmarshal(e.mustGet(t, svc, "/log?msg=from-uid-65532"), &res); err != nil || res["syslog"] != "ok" {
		t.Errorf("/dev/log as uid 65532: %v %v", res, err)
	}
}

// checkImageUser: without runAsUser the image's USER is used.
func (e *contractEnv) checkImageUser(t *testing.T, rc string) {
	svc := "imguser-" + rc
	e.waitReady(t, svc)
	info := e.info(t, svc)
	if info.UID != 65532 || info.GID != 65532 {
		t.Errorf("uid/gid %d/%d, want the image's USER 65532 (and its passwd group 65532)", info.UID, info.GID)
	}
	ctCheckFilesystems(t, info)
}

// checkLogs: stdout, stderr and /dev/log in `knbox logs`, --since, the
// Revision's logUrl, and (after a second Revision, which starts without a
// request) --revision.
func (e *contractEnv) checkLogs(t *testing.T, rc string) {
	svc := "logs-" + rc
	rev1, rev2 := svc+"-00001", svc+"-00002"
	e.waitReady(t, svc)
	old := "old-line-" + rc
	var res map[string]string
	if err := json.Unmarshal(e.mustGet(t, svc, "/log?msg="+old), &res); err != nil || res["syslog"] != "ok" {
		t.Errorf("/log: writing to stdout, stderr and /dev/log: %v %v", res, err)
	}
	oldWritten := time.Now()

	t.Run("stdout-stderr-syslog", func(t *testing.T) {
		// One line each from stdout, stderr and /dev/log.
		e.waitLogs(t, 3, old, svc)
	})
	t.Run("log-url", func(t *testing.T) {
		logURL := e.kubectl(t, "", "get", "rev", rev1, "-o", "jsonpath={.status.logUrl}")
		want := "https://" + e.k.srv.apiAddr + "/apis/serving.knative.dev/v1/namespaces/default/revisions/" + rev1 + "/log"
		if !strings.HasPrefix(logURL, want) {
			t.Errorf("logUrl %q, want %q", logURL, want)
		}
	})
	t.Run("since", func(t *testing.T) {
		// The old line is at least 10s older than the new one; --since
		// reaches 5s further back than the new line.
		if d := 10*time.Second - time.Since(oldWritten); d > 0 {
			time.Sleep(d)
		}
		recent := "recent-line-" + rc
		beforeRecent := time.Now()
		e.mustGet(t, svc, "/log?msg="+recent)
		e.waitLogs(t, 3, recent, svc)
		since := time.Duration(math.Ceil((time.Since(beforeRecent) + 5*time.Second).Seconds())) * time.Second
		out, err := e.knboxLogs(t, svc, "--since", since.String())
		if err != nil || !strings.Contains(out, recent) || strings.Contains(out, old) {
			t.Errorf("knbox logs %s --since %v: want %q and not %q: %v\n%s", svc, since, recent, old, err, out)
		}
	})
	t.Run("second-revision-starts-without-traffic", func(t *testing.T) {
		s := contractService("logs", rc, corev1.Container{Image: e.infoRef, Env: []corev1.EnvVar{{Name: "GENERATION", Value: "2"}}})
		e.apply(t, s)
		// No request goes to the Service until its second Revision is
		// Ready: knbox must start an instance on its own.
		e.waitFor(t, "rev/"+rev2, "condition=Ready", 3*time.Minute)
		e.waitFor(t, "ksvc/"+svc, "jsonpath={.status.latestReadyRevisionName}="+rev2, 2*time.Minute)
		e.waitLogs(t, 1, "runtime-info listening", "--revision", rev2, svc)
	})
	t.Run("revision", func(t *testing.T) {
		info := e.info(t, svc)
		if info.Env["K_REVISION"] != rev2 {
			t.Fatalf("the Service's traffic reached %s, want %s", info.Env["K_REVISION"], rev2)
		}
		second := "second-revision-line-" + rc
		e.mustGet(t, svc, "/log?msg="+second)
		out := e.waitLogs(t, 3, second, svc)
		if strings.Contains(out, old) {
			t.Errorf("knbox logs %s (latest revision %s) shows %s's line %q:\n%s", svc, rev2, rev1, old, out)
		}
		out = e.waitLogs(t, 3, old, svc, "--revision", rev1)
		if strings.Contains(out, second) {
			t.Errorf("knbox logs %s --revision %s shows %s's line %q:\n%s", svc, rev1, rev2, second, out)
		}
	})
}

// waitLogs polls `knbox logs args...` until it shows line at least n times
// and returns the output.
func (e *contractEnv) waitLogs(t *testing.T, n int, line string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := e.knboxLogs(t, args...)
		if err == nil && strings.Count(out, line) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("knbox logs %s: want %q %d times after 30s: %v\n%s", strings.Join(args, " "), line, n, err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkExit: /exit?code=3&msg=M ends the container; it is started again;
// the failure is in the logs and its termination message on the Revision
// (or in the logs).
func (e *contractEnv) checkExit(t *testing.T, rc string) {
	svc := "exit-" + rc
	rev := svc + "-00001"
	e.waitReady(t, svc)
	before := e.info(t, svc)
	msg := "exit-termination-message-" + rc
	code, body, err := e.get(t, svc, "/exit?code=3&msg="+msg, 30*time.Second)
	t.Logf("GET /exit: %d %v %s", code, err, body)
	if _, ok := e.waitRestart(t, svc, before.Started, 2*time.Minute); !ok {
		t.Fatalf("the container was not started again within 2m after /exit?code=3")
	}
	e.waitLogs(t, 1, "exiting with code 3", svc)
	// The termination message: on the Revision's conditions, or in the
	// logs the developer reads.
	deadline := time.Now().Add(30 * time.Second)
	var conds []ctCondition
	var logs string
	for time.Now().Before(deadline) {
		conds = e.conditions(t, "rev/"+rev)
		if strings.Contains(ctConditionsString(conds), msg) {
			return
		}
		logs, _ = e.knboxLogs(t, svc)
		if strings.Contains(logs, msg) {
			return
		}
		time.Sleep(time.Second)
	}
	t.Errorf("termination message %q (from /dev/termination-log, exit code 3) is neither on Revision %s (conditions: %s) nor in `knbox logs %s`:\n%s",
		msg, rev, ctConditionsString(conds), svc, logs)
}

// checkLiveness: a liveness probe (httpGet /healthz) that fails restarts
// the container.
func (e *contractEnv) checkLiveness(t *testing.T, rc string) {
	svc := "live-" + rc
	e.waitReady(t, svc)
	before := e.info(t, svc)
	e.mustGet(t, svc, "/fail-health")
	after, ok := e.waitRestart(t, svc, before.Started, 2*time.Minute)
	if !ok {
		t.Fatalf("the container was not restarted within 2m after its liveness probe started failing")
	}
	if after.Started.Before(before.Started) {
		t.Errorf("restarted container started %v, before the first (%v)", after.Started, before.Started)
	}
}

// checkOOM: the memory limit is in the cgroup; a process over it is killed,
// and the Revision or the logs say so.
func (e *contractEnv) checkOOM(t *testing.T, rc string) {
	svc := "oom-" + rc
	rev := svc + "-00001"
	e.waitReady(t, svc)
	before := e.info(t, svc)
	t.Run("limit-visible", func(t *testing.T) { ctCheckCgroupLimitsFor(t, rc, before, oomMemoryLimit, false) })
	code, body, err := e.get(t, svc, "/alloc?mb=256", 60*time.Second)
	if err == nil && code == 200 {
		t.Errorf("/alloc?mb=256 succeeded with a 64Mi limit: %s", body)
	}
	t.Logf("GET /alloc?mb=256: %d %v %.200s", code, err, body)
	if _, ok := e.waitRestart(t, svc, before.Started, 2*time.Minute); !ok {
		t.Fatalf("the container was not killed and started again within 2m after allocating 256MiB over a 64Mi limit")
	}
	deadline := time.Now().Add(30 * time.Second)
	var conds []ctCondition
	var logs string
	for time.Now().Before(deadline) {
		conds = e.conditions(t, "rev/"+rev)
		if ctContainsOOM(ctConditionsString(conds)) {
			return
		}
		logs, _ = e.knboxLogs(t, svc)
		if ctContainsOOM(logs) {
			return
		}
		time.Sleep(time.Second)
	}
	t.Errorf("the container was killed over its memory limit, but neither Revision %s (conditions: %s) nor `knbox logs %s` says so (OOMKilled):\n%s",
		rev, ctConditionsString(conds), svc, logs)
}

func ctContainsOOM(s string) bool {
	s = strings.ToLower(s)
	return strings.Contains(s, "oomkilled") || strings.Contains(s, "out of memory")
}

// checkCrash: a container that exits at once is restarted with backoff,
// its output is in the logs, and the Revision reports ExitCode3 with the
// termination message.
func (e *contractEnv) checkCrash(t *testing.T, rc string, applied time.Time) {
	svc := "crash-" + rc
	rev := svc + "-00001"
	deadline := time.Now().Add(2 * time.Minute)
	var conds []ctCondition
	for {
		conds = e.conditions(t, "rev/"+rev)
		if c := ctFindCondition(conds, "Ready"); c.Status == "False" && c.Reason == "ExitCode3" &&
			strings.Contains(c.Message, "crash-termination-message") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Revision %s: want Ready=False, reason ExitCode3, message with the termination message; conditions: %s",
				rev, ctConditionsString(conds))
		}
		time.Sleep(time.Second)
	}
	// Restarts: at least 3 runs, but (backoff doubling from 200ms) no more
	// than a backoff allows in the time since the Service was applied.
	var out string
	for {
		var err error
		out, err = e.knboxLogs(t, "--revision", rev, svc)
		elapsed := time.Since(applied)
		runs := strings.Count(out, "crash-output")
		if err == nil && runs >= 3 {
			if most := ctMaxRunsWithBackoff(elapsed); runs > most {
				t.Errorf("%d runs of a crashing container within %v: backoff (200ms doubling) allows at most %d", runs, elapsed, most)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("knbox logs --revision %s: want 3 runs of the crashing container: %v\n%s", rev, err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ctMaxRunsWithBackoff is how many times a container may start within d when
// restarts wait 200ms, 400ms, ... (starting afresh only after a run of
// 10s, which a container that exits at once never has).
func ctMaxRunsWithBackoff(d time.Duration) int {
	runs, wait, at := 1, 200*time.Millisecond, time.Duration(0)
	for {
		at += wait
		if at > d {
			return runs
		}
		runs++
		wait = min(2*wait, 10*time.Second)
	}
}

func ctFindCondition(cs []ctCondition, typ string) ctCondition {
	for _, c := range cs {
		if c.Type == typ {
			return c
		}
	}
	return ctCondition{Type: typ}
}

// checkExecProbeRefused: exec probes are refused at admission (422 Invalid,
// naming the probe's field).
func (e *contractEnv) checkExecProbeRefused(t *testing.T, rc string) {
	exec := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	for _, tc := range []struct {
		name, field string
		c           corev1.Container
	}{
		{"exec-ready", "readinessProbe.exec", corev1.Container{Image: e.infoRef, ReadinessProbe: exec}},
		{"exec-live", "livenessProbe.exec", corev1.Container{Image: e.infoRef, LivenessProbe: exec}},
	} {
		out, err := e.kubectlRun(t, contractManifest(t, contractService(tc.name, rc, tc.c)), "apply", "-f", "-")
		if err == nil || !strings.Contains(out, "is invalid") || !strings.Contains(out, tc.field) {
			t.Errorf("kubectl apply of a Service with an exec %s: want 422 Invalid naming %s: err=%v\n%s", tc.name, tc.field, err, out)
		}
	}
}

// TestRuntimeContractDeploymentProbe: with a progress deadline of 15s, a
// Revision that never becomes ready (its readiness probe gets 404) fails
// with ProgressDeadlineExceeded, and its instance is stopped in order
// (SIGTERM, which runtime-info logs).
func TestRuntimeContractDeploymentProbe(t *testing.T) {
	cfg := ctConfigFile(t, "configMaps:\n  config-deployment:\n    progress-deadline: 15s\n")
	e := newContractEnv(t, "--config", cfg)
	for _, rc := range contractRuntimeClasses {
		e.apply(t, contractService("never", rc, corev1.Container{
			Image:          e.infoRef,
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/never-ready"}}},
		}))
	}
	for _, rc := range contractRuntimeClasses {
		t.Run(rc, func(t *testing.T) {
			t.Parallel()
			svc := "never-" + rc
			rev := svc + "-00001"
			// The instance starts without any request (the deployment
			// probe), then fails its readiness probe until the deadline.
			e.waitLogs(t, 1, "runtime-info listening", "--revision", rev, svc)
			deadline := time.Now().Add(2 * time.Minute)
			var conds []ctCondition
			for {
				conds = e.conditions(t, "rev/"+rev)
				if c := ctFindCondition(conds, "Ready"); c.Status == "False" && c.Reason == "ProgressDeadlineExceeded" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Revision %s: want Ready=False, reason ProgressDeadlineExceeded within 2m (deadline 15s); conditions: %s",
						rev, ctConditionsString(conds))
				}
				time.Sleep(time.Second)
			}
			if c := ctFindCondition(e.conditions(t, "ksvc/"+svc), "Ready"); c.Status != "False" {
				t.Errorf("Service %s: Ready %s, want False after its Revision failed", svc, c)
			}
			t.Run("stopped-with-sigterm", func(t *testing.T) {
				e.waitLogs(t, 1, "SIGTERM received", "--revision", rev, svc)
			})
		})
	}
}
