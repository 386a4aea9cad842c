package oci

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/oci/safemount"
	knboxruntime "github.com/knbox/knbox/pkg/runtime"
)

// requireRoot skips a test that needs root, unless CI is set: CI runs as
// root, so there it fails instead.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root, and CI is set")
		}
		t.Skip("needs root")
	}
}

// requireBinary returns the path of a command the test needs; skipped (or
// failed under CI) when it is missing.
func requireBinary(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("needs %s (hack/install-deps.sh installs it), and CI is set: %v", name, err)
		}
		t.Skipf("needs %s: %v", name, err)
	}
	return p
}

// contractReport mirrors testdata/contract's Report.
type contractReport struct {
	PID             int
	Args            []string
	Env             []string
	Cwd             string
	Hostname        string
	UID, GID        int
	Groups          []int
	Status          map[string]string
	OOMScore        string
	StdinEOF        string
	Writable        map[string]string
	FSType          map[string]string
	Mode            map[string]string
	Files           map[string]string
	Links           map[string]string
	Devices         map[string]string
	Exists          map[string]bool
	Cgroup          map[string]string
	Syscalls        map[string]string
	Rlimits         map[string][2]uint64
	Interfaces      []string
	Syslog          string
	TerminationLog  string
	VolumeWriteable string
}

// built are the testdata programs built so far, by name.
var (
	builtMu sync.Mutex
	built   = map[string]string{}
)

// buildChecker builds testdata/contract statically, once per test binary.
func buildChecker(t *testing.T) string { return buildTestdata(t, "contract") }

// buildTestdata builds testdata/name statically, once per test binary.
func buildTestdata(t *testing.T, name string) string {
	t.Helper()
	builtMu.Lock()
	defer builtMu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	goBin := requireBinary(t, "go")
	out := filepath.Join(os.TempDir(), fmt.Sprintf("knbox-oci-%s-%d", name, os.Getpid()))
	cmd := exec.Command(goBin, "build", "-o", out, "./testdata/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/%s: %v\n%s", name, err, b)
	}
	built[name] = out
	return out
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, p := range built {
		os.Remove(p)
	}
	os.Exit(code)
}

var contractSeq atomic.Int32

const (
	tmpfsMagic  = "1021994"
	cgroupMagic = "27e0eb"
	sysfsMagic  = "62656572"
	procMagic   = "9fa0"
	devptsMagic = "1cd1"
	mqueueMagic = "19800202"
)

// contractRun is a container started by startContract.
type contractRun struct {
	wait           func() error // until the container has exited; an error unless with code 0
	stdout, stderr bytes.Buffer
	config         []byte
	lines          chan string // what the container wrote to /dev/log
	termLog        string      // the host file behind /dev/termination-log
}

// runContract builds a spec for c with Build, runs the contract checker in it
// with runc and returns what the checker saw, the syslog lines and the
// termination log.
func runContract(t *testing.T, c corev1.Container, pod *corev1.PodSecurityContext, policy Policy) (contractReport, string, string) {
	t.Helper()
	return runContractWith(t, "runc", c, pod, policy)
}

// runContractWith is runContract with the runtime named (see
// startContractWith).
func runContractWith(t *testing.T, runtime string, c corev1.Container, pod *corev1.PodSecurityContext, policy Policy) (contractReport, string, string) {
	t.Helper()
	run := startContractWith(t, runtime, c, pod, policy, "")
	if err := run.wait(); err != nil {
		t.Fatalf("%s run: %v\nstdout: %s\nstderr: %s\nconfig.json: %s", runtime, err, run.stdout.String(), run.stderr.String(), run.config)
	}
	var r contractReport
	if err := json.Unmarshal(run.stdout.Bytes(), &r); err != nil {
		t.Fatalf("checker output: %v\n%s\nstderr: %s", err, run.stdout.String(), run.stderr.String())
	}
	var got string
	select {
	case got = <-run.lines:
	case <-time.After(5 * time.Second):
	}
	tl, err := os.ReadFile(run.termLog)
	if err != nil {
		t.Fatal(err)
	}
	return r, got, string(tl)
}

// startContract builds a spec for c with Build (joining netns if given) and
// starts the contract checker in it with runc ("runc run", in the
// foreground), for at most three minutes.
func startContract(t *testing.T, c corev1.Container, pod *corev1.PodSecurityContext, policy Policy, netns string) *contractRun {
	t.Helper()
	return startContractWith(t, "runc", c, pod, policy, netns)
}

// startContractWith is startContract with the runtime named: runc, or
// runsc with the arguments knbox's built-in runsc handler gives it (the
// spec's cgroupsPath is then empty: runsc leaves the sandbox in the test's
// cgroup).
func startContractWith(t *testing.T, runtime string, c corev1.Container, pod *corev1.PodSecurityContext, policy Policy, netns string) *contractRun {
	t.Helper()
	requireRoot(t)
	runc := requireBinary(t, runtime)
	var global []string
	cgroupsPath := func(id string) string { return id } // relative: below the test's own cgroups, removed by runc delete
	if runtime == "runsc" {
		global = []string{"--network=host", "--host-uds=open", "--oci-seccomp"}
		cgroupsPath = func(string) string { return "" }
	}
	checker := buildChecker(t)

	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(dir, 0o755))
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"rootfs/etc", "rootfs/home/app", "host", "vol", "state"} {
		must(os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	bin, err := os.ReadFile(checker)
	must(err)
	must(os.WriteFile(filepath.Join(rootfs, "check"), bin, 0o755))
	must(os.WriteFile(filepath.Join(rootfs, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n"), 0o644))
	must(os.WriteFile(filepath.Join(rootfs, "etc/group"), []byte("root:x:0:\napp:x:1000:\nextra:x:2000:app\n"), 0o644))
	host := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, "host", name)
		must(os.WriteFile(p, []byte(content), mode))
		must(os.Chmod(p, mode))
		return p
	}
	hosts := host("hosts", "127.0.0.1 localhost\n", 0o644)
	hostname := host("hostname", "contract\n", 0o644)
	resolv := host("resolv.conf", "nameserver 127.0.0.53\n", 0o644)
	termLog := host("termination-log", "", 0o666)
	must(os.WriteFile(filepath.Join(dir, "vol/key"), []byte("secret-value"), 0o644))

	sock := filepath.Join(dir, "host", "log.sock")
	syslog, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	must(err)
	t.Cleanup(func() { syslog.Close() })
	must(os.Chmod(sock, 0o666))
	lines := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := syslog.Read(buf)
			if err != nil {
				close(lines)
				return
			}
			lines <- string(buf[:n])
		}
	}()

	id := fmt.Sprintf("knbox-oci-contract-%d-%d", os.Getpid(), contractSeq.Add(1))
	pin := pinIn(t, filepath.Join(dir, "pinned"))
	spec, err := Build(Input{
		Container:   c,
		PodSecurity: pod,
		Image:       ImageConfig{Env: []string{"PATH=/bin", "IMAGE_ONLY=yes", "PORT=1"}},
		Env:         []string{"PORT=8080", "K_SERVICE=hello", "K_CONFIGURATION=hello", "K_REVISION=hello-00001", "GREETING=hi"},
		Rootfs:      rootfs,
		Hostname:    "hello-00001-abc",
		CgroupsPath: cgroupsPath(id),
		EtcHosts:    hosts, EtcHostname: hostname, ResolvConf: resolv,
		TerminationLog: termLog,
		NetNSPath:      netns,
		SyslogSocket:   sock,
		Volumes:        map[string]Volume{"data": {Path: filepath.Join(dir, "vol")}},
		MachineMemory:  8 << 30,
		Policy:         withOpenFiles(policy),
		Pin:            pin,
	})
	must(err)
	b, err := json.MarshalIndent(spec, "", "  ")
	must(err)
	must(os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644))

	state := filepath.Join(dir, "state")
	t.Cleanup(func() {
		out, err := exec.Command(runc, append(append([]string{"--root", state}, global...), "delete", "--force", id)...).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "does not exist") {
			t.Logf("runc delete: %v: %s", err, out)
		}
		removeCgroups(t, id)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // generous: the machine is shared and runsc under ptrace is slow when it is busy
	run := &contractRun{config: b, lines: lines, termLog: termLog}
	if runtime == "runsc" {
		// Through knbox's handler, as the built-in runsc runtime runs it
		// (which rewrites the seccomp profile's ENOSYS rules for runsc).
		h, err := knboxruntime.NewOCI(knboxruntime.OCIConfig{Binary: runc, Root: state, Args: global, SandboxENOSYS: true})
		must(err)
		c, err := h.Create(ctx, id, dir, knboxruntime.IO{Stdout: &run.stdout, Stderr: &run.stderr})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		run.wait = func() error {
			st, err := c.Wait(ctx)
			if err == nil && st.Code != 0 {
				err = errors.New(st.String())
			}
			return err
		}
		t.Cleanup(func() {
			cancel()
			if err := c.Delete(context.Background()); err != nil {
				t.Errorf("delete: %v", err)
			}
		})
		return run
	}
	cmd := exec.CommandContext(ctx, runc, append(append([]string{"--root", state}, global...), "run", "--bundle", dir, id)...)
	cmd.Stdout, cmd.Stderr = &run.stdout, &run.stderr // stdin: /dev/null
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(done)
	}()
	run.wait = func() error { <-done; return waitErr }
	t.Cleanup(func() {
		cancel() // kills runc if it still runs; then the delete above removes the container
		<-done
	})
	return run
}

// pinIn returns an Input.Pin hook that pins into the staging directory
// dir, as knbox's instances do; the test's cleanup releases it.
func pinIn(t *testing.T, dir string) func(HostPath) (string, error) {
	t.Helper()
	d, err := safemount.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := safemount.Release(dir); err != nil {
			t.Errorf("release the pinned mounts: %v", err)
		}
	})
	return func(hp HostPath) (string, error) {
		return d.Pin(hp.Root, hp.Rel, safemount.Options{FollowSymlinks: hp.FollowSymlinks})
	}
}

// removeCgroups removes what runc may have left of a relative cgroupsPath
// below this process's cgroups (runc delete removes it; this is the
// belt to its braces).
func removeCgroups(t *testing.T, rel string) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[1] == "" {
			continue
		}
		for _, ctrl := range strings.Split(f[1], ",") {
			ctrl = strings.TrimPrefix(ctrl, "name=")
			p := filepath.Join("/sys/fs/cgroup", ctrl, f[2], rel)
			if err := os.Remove(p); err == nil {
				t.Logf("removed leftover cgroup %s", p)
			}
		}
	}
}

// TestContractWithRunc runs the contract checker under the real runc with a
// spec from Build and checks, point by point, what DESIGN.md's "The runtime
// contract, point by point" asks of the container's view.
func TestContractWithRunc(t *testing.T) {
	limits := corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("500m")},
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi"), corev1.ResourceCPU: resource.MustParse("250m")},
	}
	mounts := []corev1.VolumeMount{
		{Name: "data", MountPath: "/data", ReadOnly: true},
		{Name: "data", MountPath: "/sub/key", SubPath: "key", ReadOnly: true},
	}
	uid, yes := int64(1000), true

	tests := []struct {
		name  string
		c     corev1.Container
		check func(t *testing.T, r contractReport)
	}{{
		name: "root by default",
		c:    corev1.Container{Name: "user-container", Command: []string{"/check"}, Args: []string{"$(GREETING)", "$$(GREETING)"}, Resources: limits, VolumeMounts: mounts},
		check: func(t *testing.T, r contractReport) {
			eq(t, "uid", r.UID, 0)
			eq(t, "CapBnd", r.Status["CapBnd"], "0000000000000400") // NET_BIND_SERVICE alone, as "restricted" allows
			eq(t, "CapEff", r.Status["CapEff"], "0000000000000400")
			eq(t, "writable /", r.Writable["/"], "")
			eq(t, "HOME", envOf(r.Env, "HOME"), "/root")
		},
	}, {
		name: "non-root with a read-only root and Knative's secure defaults",
		c: corev1.Container{
			Name: "user-container", Command: []string{"/check"}, Args: []string{"$(GREETING)", "$$(GREETING)"}, Resources: limits, VolumeMounts: mounts,
			SecurityContext: &corev1.SecurityContext{
				RunAsUser:              &uid,
				ReadOnlyRootFilesystem: &yes,
				Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}},
			},
		},
		check: func(t *testing.T, r contractReport) {
			eq(t, "uid", r.UID, 1000)
			eq(t, "gid", r.GID, 1000)
			eq(t, "groups", fmt.Sprint(r.Groups), "[1000 2000]")
			eq(t, "CapBnd", r.Status["CapBnd"], "0000000000000400") // NET_BIND_SERVICE only
			eq(t, "CapEff", r.Status["CapEff"], "0000000000000000") // a non-root exec keeps none
			eq(t, "writable /", r.Writable["/"], "EROFS")
			eq(t, "writable /etc", r.Writable["/etc"], "EROFS")
			eq(t, "HOME", envOf(r.Env, "HOME"), "/home/app")
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, syslog, termLog := runContract(t, tt.c, nil, Policy{})
			if t.Failed() {
				return
			}
			// Process: args with $(VAR) expanded, env, cwd, pid 1, no stdin.
			eq(t, "args", fmt.Sprint(r.Args), "[/check hi $(GREETING)]")
			eq(t, "PORT", envOf(r.Env, "PORT"), "8080") // the caller's PORT wins over the image's
			eq(t, "K_SERVICE", envOf(r.Env, "K_SERVICE"), "hello")
			eq(t, "K_CONFIGURATION", envOf(r.Env, "K_CONFIGURATION"), "hello")
			eq(t, "K_REVISION", envOf(r.Env, "K_REVISION"), "hello-00001")
			eq(t, "image env", envOf(r.Env, "IMAGE_ONLY"), "yes")
			eq(t, "first env", r.Env[0], "PORT=8080")
			eq(t, "cwd", r.Cwd, "/")
			eq(t, "pid", r.PID, 1)
			eq(t, "stdin", r.StdinEOF, "EOF")
			eq(t, "hostname", r.Hostname, "hello-00001-abc")
			eq(t, "NoNewPrivs", r.Status["NoNewPrivs"], "1")
			eq(t, "CapInh", r.Status["CapInh"], "0000000000000000")
			eq(t, "CapAmb", r.Status["CapAmb"], "0000000000000000")
			eq(t, "oom_score_adj", r.OOMScore, "997") // 1000 - 1000 * 32Mi / 8Gi

			// Filesystems: /tmp and /var/log writable tmpfs for any uid,
			// /dev/log a socket whose lines reach the host, the termination
			// log written through, the /etc files read-only.
			for _, p := range []string{"/tmp", "/var/log", "/dev/shm"} {
				eq(t, "writable "+p, r.Writable[p], "")
				eq(t, "fstype "+p, r.FSType[p], tmpfsMagic)
			}
			eq(t, "mode /tmp", r.Mode["/tmp"], "dtrwxrwxrwx")
			eq(t, "mode /var/log", r.Mode["/var/log"], "dtrwxrwxrwx")
			eq(t, "fstype /dev", r.FSType["/dev"], tmpfsMagic)
			eq(t, "fstype /dev/pts", r.FSType["/dev/pts"], devptsMagic)
			eq(t, "fstype /dev/mqueue", r.FSType["/dev/mqueue"], mqueueMagic)
			eq(t, "fstype /proc", r.FSType["/proc"], procMagic)
			eq(t, "fstype /sys", r.FSType["/sys"], sysfsMagic)
			eq(t, "mode /dev/log", r.Mode["/dev/log"][0:1], "S")
			eq(t, "syslog write", r.Syslog, "")
			eq(t, "syslog line", syslog, "<14>contract: hello syslog")
			eq(t, "termination log write", r.TerminationLog, "")
			eq(t, "termination log", termLog, "contract: goodbye")
			eq(t, "/etc/hosts", r.Files["/etc/hosts"], "127.0.0.1 localhost\n")
			eq(t, "/etc/hostname", r.Files["/etc/hostname"], "contract\n")
			eq(t, "/etc/resolv.conf", r.Files["/etc/resolv.conf"], "nameserver 127.0.0.53\n")
			readOnly(t, r, "/etc/hosts")
			eq(t, "writable /sys", r.Writable["/sys"], "EROFS")
			// Volumes: read-only, subPath.
			eq(t, "volume", r.Files["/data/key"], "secret-value")
			eq(t, "subPath", r.Files["/sub/key"], "secret-value")
			eq(t, "volume write", r.VolumeWriteable, "EROFS")

			// Devices and /dev links (made by runc, see the package doc).
			for p, want := range map[string]string{
				"/dev/null": "c 1:3", "/dev/zero": "c 1:5", "/dev/full": "c 1:7",
				"/dev/random": "c 1:8", "/dev/urandom": "c 1:9", "/dev/tty": "c 5:0",
			} {
				eq(t, p, r.Devices[p], want)
			}
			for p, want := range map[string]string{
				"/dev/ptmx": "pts/ptmx", "/dev/fd": "/proc/self/fd",
				"/dev/stdin": "/proc/self/fd/0", "/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2",
			} {
				eq(t, p, r.Links[p], want)
			}
			eq(t, "/dev/console exists", r.Exists["/dev/console"], false)
			eq(t, "/dev/kmsg exists", r.Exists["/dev/kmsg"], false)
			eq(t, "write /dev/null", r.Syscalls["open /dev/null"], "")
			eq(t, "mknod'ed block device", r.Syscalls["mknod sda"], "EPERM") // no CAP_MKNOD, even for root

			// Masked and read-only paths.
			for _, p := range []string{"/proc/keys", "/proc/timer_list"} {
				eq(t, "masked "+p, r.Files[p], "")
			}
			eq(t, "masked /sys/firmware", r.Files["/sys/firmware"], "0 entries")
			readOnly(t, r, "/proc/sys/kernel/hostname")

			// cgroups: limits enforced and visible where the contract says.
			eq(t, "memory.limit_in_bytes", r.Cgroup["memory/memory.limit_in_bytes"], "67108864")
			eq(t, "cpu.cfs_period_us", r.Cgroup["cpu/cpu.cfs_period_us"], "100000")
			eq(t, "cpu.cfs_quota_us", r.Cgroup["cpu/cpu.cfs_quota_us"], "50000")
			eq(t, "cpu.shares", r.Cgroup["cpu/cpu.shares"], "256")
			eq(t, "pids.max", r.Cgroup["pids/pids.max"], "4096")
			if v := r.Cgroup["memory/memory.memsw.limit_in_bytes"]; !strings.HasPrefix(v, "error") {
				eq(t, "memory.memsw.limit_in_bytes", v, "67108864")
			}
			readOnly(t, r, "/sys/fs/cgroup/memory/memory.limit_in_bytes")

			// seccomp and the rest of the hardening.
			eq(t, "Seccomp", r.Status["Seccomp"], "2")
			for name, want := range map[string]string{
				"unshare(CLONE_NEWUSER)": "EPERM", "keyctl": "EPERM", "mount": "EPERM", "ptrace": "EPERM",
				"bpf": "EPERM", "userfaultfd": "EPERM", "setns": "EPERM",
				"clone3": "ENOSYS", "io_uring_setup": "ENOSYS", "getpid": "",
				"sysfs": "EPERM", "personality(query)": "", "personality(ADDR_NO_RANDOMIZE)": "EPERM",
				"socket(AF_VSOCK)": "EPERM", "chroot": "EPERM", "unshare(CLONE_NEWNS)": "EPERM",
			} {
				eq(t, name, r.Syscalls[name], want)
			}
			eq(t, "RLIMIT_CORE", r.Rlimits["CORE"], [2]uint64{0, 0})
			nofile := min(DefaultOpenFiles, MaxOpenFiles())
			eq(t, "RLIMIT_NOFILE", r.Rlimits["NOFILE"], [2]uint64{nofile, nofile})

			// Network: a new namespace with only its loopback.
			eq(t, "interfaces", fmt.Sprint(r.Interfaces), "[lo up|loopback|running]")

			tt.check(t, r)
		})
	}
}

// readOnly checks that opening p for writing failed because its mount is
// read-only; a non-root user may meet the file's permissions first.
func readOnly(t *testing.T, r contractReport, p string) {
	t.Helper()
	got := r.Writable[p]
	if got != "EROFS" && (r.UID == 0 || got != "EACCES") {
		t.Errorf("opening %s for writing: %q, want EROFS", p, got)
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func envOf(env []string, name string) string {
	for _, kv := range env {
		if n, v, _ := strings.Cut(kv, "="); n == name {
			return v
		}
	}
	return "<unset>"
}

func withOpenFiles(p Policy) Policy {
	if p.OpenFiles == 0 {
		p.OpenFiles = min(DefaultOpenFiles, MaxOpenFiles())
	}
	return p
}

// TestContractNetworkWithRunc joins a container to a namespace from package
// network and reaches its server the way the router will: by dialing into
// the namespace's loopback on PORT.
func TestContractNetworkWithRunc(t *testing.T) {
	requireRoot(t)
	root := filepath.Join(t.TempDir(), "netns")
	t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	ns, err := network.CreateIn(root, "contract")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Error(err)
		}
	})
	c := corev1.Container{Name: "user-container", Command: []string{"/check", "serve"}}
	run := startContract(t, c, nil, Policy{}, ns.Path)

	// The server needs a moment to listen: retry refused dials until a deadline.
	var conn net.Conn
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err = ns.Dial(context.Background(), "tcp", "127.0.0.1:8080")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("dial the container: %v\nstderr: %s", err, run.stderr.String())
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: hello\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello from hello-00001-abc (lo)"; string(body) != want {
		t.Errorf("response %q, want %q", body, want)
	}
	if err := run.wait(); err != nil {
		t.Errorf("container: %v\nstderr: %s", err, run.stderr.String())
	}
}

// TestCapabilitiesAndSeccompWithRunsc: under runsc, as under runc, a
// non-root process has no effective or permitted capabilities (runsc
// 20221219 handed uid 1000 the spec's sets: CapEff a80405fb), root has the
// default set alone, and runsc applies the allow-list profile (with
// --oci-seccomp, as knbox's runsc handler runs it) without refusing it.
func TestCapabilitiesAndSeccompWithRunsc(t *testing.T) {
	uid := int64(1000)
	for _, tt := range []struct {
		name        string
		sc          *corev1.SecurityContext
		eff, bounds string
	}{
		{"root", nil, "0000000000000400", "0000000000000400"},
		{"uid 1000", &corev1.SecurityContext{RunAsUser: &uid}, "0000000000000000", "0000000000000400"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := corev1.Container{Name: "user-container", Command: []string{"/check"}, SecurityContext: tt.sc}
			r, _, _ := runContractWith(t, "runsc", c, nil, Policy{})
			if t.Failed() {
				return
			}
			eq(t, "CapEff", r.Status["CapEff"], tt.eff)
			eq(t, "CapPrm", r.Status["CapPrm"], tt.eff)
			eq(t, "CapBnd", r.Status["CapBnd"], tt.bounds)
			eq(t, "CapInh", r.Status["CapInh"], "0000000000000000")
			// gVisor's /proc/self/status has no NoNewPrivs and no Seccomp
			// line; the calls below show the filter at work. clone3 is
			// allowed through to gVisor, which answers ENOSYS itself (runsc
			// 20221219 answers EPERM to every errno rule); personality's
			// query is gVisor's EINVAL, past the filter.
			for name, want := range map[string]string{
				"unshare(CLONE_NEWUSER)": "EPERM", "keyctl": "EPERM", "mount": "EPERM", "ptrace": "EPERM",
				"setns": "EPERM", "clone3": "ENOSYS", "getpid": "", "bpf": "EPERM", "userfaultfd": "EPERM",
				"sysfs": "EPERM", "personality(ADDR_NO_RANDOMIZE)": "EPERM", "chroot": "EPERM", "socket(AF_VSOCK)": "EPERM",
			} {
				eq(t, name, r.Syscalls[name], want)
			}
		})
	}
}
