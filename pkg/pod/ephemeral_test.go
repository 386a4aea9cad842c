package pod

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// storageEnv is an env that measures pods' storage every 100ms and
// records their events.
func storageEnv(t *testing.T, h string, defaultLimit int64) (*env, func() []Event) {
	var mu sync.Mutex
	var evs []Event
	e := newEnv(t, []string{h}, func(o *Options) {
		o.EphemeralStorage = EphemeralStorage{Interval: 100 * time.Millisecond, DefaultLimit: defaultLimit}
		o.Events = func(ev Event) {
			mu.Lock()
			evs = append(evs, ev)
			mu.Unlock()
		}
	})
	return e, func() []Event {
		mu.Lock()
		defer mu.Unlock()
		return append([]Event(nil), evs...)
	}
}

// writeThenWait writes n MiB to path from the container, then waits.
func writeThenWait(path string, n int) func(*Spec) {
	return shell("dd if=/dev/urandom of=" + path + " bs=1M count=" + strconv.Itoa(n) + " 2>/dev/null; sleep 3600")
}

func withScratch(medium corev1.StorageMedium, limit string) func(*Spec) {
	return func(s *Spec) {
		v := Volume{Name: "scratch", EmptyDir: true, Medium: medium}
		if limit != "" {
			q := resource.MustParse(limit)
			v.SizeLimit = &q
		}
		s.Volumes = append(s.Volumes, v)
		s.Containers[0].VolumeMounts = append(s.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"})
	}
}

func withStorageLimit(limit string) func(*Spec) {
	return func(s *Spec) {
		s.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse(limit)}
	}
}

// TestEphemeralStorageEviction: a pod over its local storage limits is
// evicted (its containers killed) with the kubelet's reason and message,
// in its status, its events and its log; it then starts again as a new
// pod would, its emptyDirs empty. Under runsc the sandbox writes the root
// filesystem's changes through to the host's upper directory, so it is
// measured as under runc.
func TestEphemeralStorageEviction(t *testing.T) {
	cases := []struct {
		name         string
		defaultLimit int64
		mutate       []func(*Spec)
		container    string
		message      string
	}{
		{
			name:    "writable layer",
			mutate:  []func(*Spec){withStorageLimit("10Mi"), writeThenWait("/big", 20)},
			message: "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi.",
		},
		{
			name:    "emptyDir sizeLimit",
			mutate:  []func(*Spec){withScratch("", "5Mi"), writeThenWait("/scratch/big", 10)},
			message: `Usage of EmptyDir volume "scratch" exceeds the limit "5Mi".`,
		},
		{
			name:         "operator default limit",
			defaultLimit: 8 << 20,
			mutate:       []func(*Spec){writeThenWait("/big", 16)},
			message:      "Pod ephemeral local storage usage exceeds the total limit of containers 8Mi.",
		},
	}
	for _, h := range []string{"runc", "runsc"} {
		for _, tc := range cases {
			t.Run(h+"/"+tc.name, func(t *testing.T) {
				requireHandler(t, h)
				ref := busyboxImage(t)
				e, events := storageEnv(t, h, tc.defaultLimit)
				id := uniqueName("evict")
				e.run(e.spec(id, h, ref, tc.mutate...))
				st := e.waitStatus(id, 60*time.Second, "evicted", failedWith(ReasonEvicted))
				if st.LastFailure.Message != tc.message {
					t.Errorf("message %q, want %q", st.LastFailure.Message, tc.message)
				}
				found := false
				for _, ev := range events() {
					if ev.Reason == EventEvicted && ev.Warning && ev.Message == tc.message {
						found = true
					}
				}
				if !found {
					t.Errorf("no Evicted event with the message; events %+v", events())
				}
				eventually(t, 10*time.Second, "the eviction in the pod's log", func() bool {
					return strings.Contains(e.logs(id), "knbox: evicted: "+tc.message)
				})
				// It starts again (fresh root filesystem, empty emptyDir)
				// and is evicted again.
				e.waitStatus(id, 60*time.Second, "restarted", func(st Status) bool { return st.Restarts >= 1 })
			})
		}
	}
}

// TestEphemeralStorageUnderLimit: a pod within its limits runs on.
func TestEphemeralStorageUnderLimit(t *testing.T) {
	requireHandler(t, "runc")
	ref := busyboxImage(t)
	e, _ := storageEnv(t, "runc", 0)
	id := uniqueName("under")
	e.run(e.spec(id, "runc", ref, withStorageLimit("20Mi"), withScratch("", "20Mi"),
		shell("dd if=/dev/urandom of=/big bs=1M count=4 2>/dev/null; dd if=/dev/urandom of=/scratch/big bs=1M count=4 2>/dev/null; touch /done; sleep 3600")))
	p := e.rt.pod(id)
	if p == nil {
		t.Fatal("no pod")
	}
	eventually(t, 30*time.Second, "the writes done", func() bool {
		_, err := os.Stat(filepath.Join(p.dir, "upper", "done"))
		return err == nil
	})
	// Status, read under the pod's lock once it says Running, orders the
	// pod goroutine's preparation before the measures below.
	e.waitStatus(id, 30*time.Second, "running", func(st Status) bool { return st.Running })
	for i := 0; i < 3; i++ {
		if ev := p.checkStorage(context.Background()); ev != nil {
			t.Fatalf("evicted under the limit: %+v", ev.f)
		}
	}
	if st, _ := e.rt.Status(id); st.Failures != 0 {
		t.Errorf("failures %d (%+v), want none", st.Failures, st.LastFailure)
	}
}

// TestMemoryEmptyDirBounded: an emptyDir of medium Memory is a tmpfs of
// its sizeLimit; a write past it fails in the container.
func TestMemoryEmptyDirBounded(t *testing.T) {
	for _, h := range []string{"runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := busyboxImage(t)
			e, _ := storageEnv(t, h, 0)
			id := uniqueName("memdir")
			e.run(e.spec(id, h, ref, withScratch(corev1.StorageMediumMemory, "4Mi"),
				shell("dd if=/dev/zero of=/scratch/big bs=1M count=10 2>/dev/null; echo \"dd $? size $(wc -c < /scratch/big)\" > /dev/termination-log; exit 3")))
			st := e.waitStatus(id, 60*time.Second, "exited", failedWith(ReasonError))
			if want := "dd 1 size 4194304"; st.LastFailure.Message != want {
				t.Errorf("termination message %q, want %q", st.LastFailure.Message, want)
			}
		})
	}
}

// TestTerminationLogBounded: a container that writes 100 MiB to
// /dev/termination-log puts at most 4096 bytes on the host: the write past
// them fails.
func TestTerminationLogBounded(t *testing.T) {
	for _, h := range []string{"runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := busyboxImage(t)
			e, _ := storageEnv(t, h, 0)
			id := uniqueName("termlog")
			e.run(e.spec(id, h, ref,
				shell("dd if=/dev/zero of=/dev/termination-log bs=1M count=100 2>/dev/null; s=$?; echo \"dd $s\" > /dev/termination-log; exit 3")))
			st := e.waitStatus(id, 60*time.Second, "exited", failedWith(ReasonError))
			if want := "dd 1"; st.LastFailure.Message != want {
				t.Errorf("termination message %q, want %q (the 100 MiB write must fail)", st.LastFailure.Message, want)
			}
			p := e.rt.pod(id)
			if p == nil {
				t.Fatal("no pod")
			}
			var fs unix.Statfs_t
			if err := unix.Statfs(filepath.Join(p.dir, termLogDir), &fs); err != nil {
				t.Fatal(err)
			}
			if fs.Type != unix.TMPFS_MAGIC || int64(fs.Blocks)*fs.Bsize > 4096 {
				t.Errorf("termination log's file system: type %x, %d bytes; want a tmpfs of 4096", fs.Type, int64(fs.Blocks)*fs.Bsize)
			}
		})
	}
}

// TestDiskUsage: the measure counts allocated blocks, a hard link once,
// follows no link and stops at its bounds.
func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "b", "f"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "a", "b", "f"), filepath.Join(dir, "a", "g")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dir, "root")); err != nil {
		t.Fatal(err)
	}
	u, err := diskUsage(context.Background(), dir, walkBounds{})
	if err != nil {
		t.Fatal(err)
	}
	if u.bytes < 1<<20 || u.bytes > 1<<20+64<<10 {
		t.Errorf("usage %d bytes, want about 1 MiB (the hard link once, the link to / not followed)", u.bytes)
	}
	if u.files != 5 {
		t.Errorf("%d files, want 5", u.files)
	}
	if _, err := diskUsage(context.Background(), dir, walkBounds{maxFiles: 3}); err == nil || !strings.Contains(err.Error(), "more than 3 files") {
		t.Errorf("maxFiles 3: err %v", err)
	}
	if _, err := diskUsage(context.Background(), dir, walkBounds{maxDepth: 2}); err == nil || !strings.Contains(err.Error(), "more than 2 levels") {
		t.Errorf("maxDepth 2: err %v", err)
	}
	if u, err := diskUsage(context.Background(), filepath.Join(dir, "missing"), walkBounds{}); err != nil || u.bytes != 0 {
		t.Errorf("missing: %+v, %v", u, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := diskUsage(ctx, dir, walkBounds{}); err == nil {
		t.Error("a walk with an ended context went on")
	}
}

// TestEmptyDirSpecRefused: a medium or a size the runtime cannot make is a
// config error.
func TestEmptyDirSpecRefused(t *testing.T) {
	neg := resource.MustParse("-1")
	for _, v := range []Volume{
		{Name: "v", EmptyDir: true, Medium: "HugePages"},
		{Name: "v", EmptyDir: true, SizeLimit: &neg},
		{Name: "v", Medium: corev1.StorageMediumMemory},
	} {
		if err := checkEmptyDir(v); err == nil {
			t.Errorf("%+v: accepted", v)
		}
	}
}

// FuzzStorageLimits: whatever limits and emptyDir a spec holds (they come
// from the API), the runtime refuses them with a reason or derives bounded
// limits from them, and a Memory emptyDir's tmpfs is never larger than its
// sizeLimit or the machine.
func FuzzStorageLimits(f *testing.F) {
	f.Add("10Mi", "5Mi", "", int64(0))
	f.Add("", "1Gi", "Memory", int64(8<<20))
	f.Add("1e18", "-1", "HugePages", int64(-1))
	f.Add("0", "0", "Memory", int64(1))
	f.Add("9223372036854775807", "100Ei", "Memory", int64(1<<62))
	f.Fuzz(func(t *testing.T, ctrLimit, sizeLimit, medium string, defaultLimit int64) {
		spec := Spec{ID: "p", Containers: []corev1.Container{{Name: "app"}}}
		if q, err := resource.ParseQuantity(ctrLimit); err == nil {
			spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: q, corev1.ResourceMemory: q}
		}
		v := Volume{Name: "v", EmptyDir: true, Medium: corev1.StorageMedium(medium)}
		if q, err := resource.ParseQuantity(sizeLimit); err == nil {
			v.SizeLimit = &q
		}
		spec.Volumes = []Volume{v}
		if err := checkEmptyDir(v); err != nil {
			if err.Error() == "" {
				t.Fatal("a refusal without a reason")
			}
			return
		}
		l := newStorageLimits(&spec, defaultLimit)
		if len(l.ctrs) != 1 {
			t.Fatalf("%d container limits", len(l.ctrs))
		}
		if (l.ctrs[0] != nil) != (l.pod != nil) {
			t.Fatalf("container limit %v, pod limit %v", l.ctrs[0], l.pod)
		}
		const machine = 1 << 30
		p := &pod{rt: &Runtime{memory: machine}, spec: spec}
		size := p.memoryVolumeSize(v)
		if size < 0 || size > machine {
			t.Fatalf("tmpfs size %d, want within the machine's %d", size, machine)
		}
		if v.SizeLimit != nil && v.SizeLimit.Sign() > 0 && size > v.SizeLimit.Value() {
			t.Fatalf("tmpfs size %d over sizeLimit %s", size, v.SizeLimit)
		}
	})
}
