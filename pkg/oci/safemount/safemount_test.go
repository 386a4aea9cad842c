package safemount

import (
	"bufio"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// requireRoot skips a test that needs root (mounts), unless CI is set: CI
// runs as root, so there it fails instead.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (bind mounts), and CI is set")
		}
		t.Skip("needs root (bind mounts)")
	}
}

// tree makes a root with a directory, a file, a socket, a FIFO, links that
// stay inside and links that lead out, and a "host" directory beside it
// with a marker that must never be reachable through a pin.
func tree(t testing.TB) (root, host string) {
	t.Helper()
	base := t.TempDir()
	root, host = filepath.Join(base, "root"), filepath.Join(base, "host")
	for _, d := range []string{root, host, filepath.Join(root, "dir", "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(host, "marker"), "host")
	write(filepath.Join(root, "dir", "file"), "inside")
	for link, target := range map[string]string{
		"in-rel":   "dir/file",
		"in-dir":   "dir",
		"out-abs":  host,
		"out-rel":  "../host",
		"out-deep": "dir/../../host",
		"loop":     "loop",
		"to-abs":   "/dir", // absolute: under RESOLVE_BENEATH, out
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(root, "sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return root, host
}

func openDir(t testing.TB) *Dir {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "staged")
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Release(dir); err != nil {
			t.Errorf("release: %v", err)
		}
		if n := mountsBelow(t, filepath.Dir(dir)); n != 0 {
			t.Errorf("%d mounts left below %s", n, dir)
		}
	})
	return d
}

func mountsBelow(t testing.TB, dir string) int {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 4 && strings.HasPrefix(fs[4], dir+"/") {
			n++
		}
	}
	return n
}

func TestPin(t *testing.T) {
	requireRoot(t)
	root, _ := tree(t)
	d := openDir(t)
	if fi, err := os.Stat(d.Path()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("staging directory: %v, %v; want mode 0700", fi, err)
	}
	for _, tt := range []struct {
		rel    string
		follow bool
		want   string // content of the pinned file, "dir" for a directory, or the error
	}{
		{rel: "", want: "dir"},
		{rel: "dir", want: "dir"},
		{rel: "dir/file", want: "inside"},
		{rel: "dir/sub/../file", want: "inside"},
		{rel: "sock", want: "socket"},
		{rel: "in-rel", follow: true, want: "inside"},
		{rel: "in-dir/file", follow: true, want: "inside"},
		{rel: "in-rel", want: "passes a symbolic link"},
		{rel: "in-dir/file", want: "passes a symbolic link"},
		{rel: "out-abs", follow: true, want: "leads out of"},
		{rel: "out-rel", follow: true, want: "leads out of"},
		{rel: "out-deep", follow: true, want: "leads out of"},
		{rel: "to-abs", follow: true, want: "leads out of"},
		{rel: "../host/marker", follow: true, want: "leads out of"},
		{rel: "/etc/passwd", follow: true, want: "not a relative path"},
		{rel: "loop", follow: true, want: "too many levels"},
		{rel: "missing", follow: true, want: "no such file"},
		{rel: "fifo", want: "neither a directory"},
	} {
		p, err := d.Pin(root, tt.rel, Options{FollowSymlinks: tt.follow})
		var got string
		switch {
		case err != nil:
			got = err.Error()
		default:
			fi, serr := os.Lstat(p)
			switch {
			case serr != nil:
				got = serr.Error()
			case fi.IsDir():
				got = "dir"
			case fi.Mode()&fs.ModeSocket != 0:
				got = "socket"
			default:
				b, _ := os.ReadFile(p)
				got = string(b)
			}
			if !strings.HasPrefix(p, d.Path()+"/") {
				t.Errorf("%q pinned at %s, outside the staging directory", tt.rel, p)
			}
		}
		if !strings.Contains(got, tt.want) {
			t.Errorf("Pin(%q, follow %v) = %q, want %q", tt.rel, tt.follow, got, tt.want)
		}
	}

	// A pinned directory is the directory: writes through it land there.
	p, err := d.Pin(root, "dir/sub", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "through"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "dir", "sub", "through")); err != nil {
		t.Errorf("a write through the pin did not land in the directory: %v", err)
	}
	// A root that is a link is refused.
	if _, err := d.Pin(filepath.Join(root, "in-dir"), "", Options{}); err == nil {
		t.Error("a root that is a symbolic link was pinned")
	}
}

// TestPinRace: another process (here a goroutine, standing for a container
// that shares the volume) keeps swapping "a" between a directory and a link
// to a host directory while a is pinned; no pin ever shows the host
// directory. Before package safemount, knbox resolved the path to a string
// and runc resolved that string again at mount time.
func TestPinRace(t *testing.T) {
	requireRoot(t)
	root, host := tree(t)
	d := openDir(t)
	// "a" and "b" are a directory and a link to the host directory, and
	// trade places atomically, again and again.
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	if err := os.Mkdir(a, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, b); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load() && i < 10_000_000; i++ {
			_ = unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
		}
	}()
	escapes, pinned := 0, 0
	for range 2000 {
		p, err := d.Pin(root, "a", Options{FollowSymlinks: true})
		if err != nil {
			continue
		}
		pinned++
		if _, err := os.Stat(filepath.Join(p, "marker")); err == nil {
			escapes++
		}
		if err := unmountAll(p); err != nil {
			t.Fatal(err)
		}
		removeEntry(p)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("2000 pins under a swapping path: %d pinned, %d refused, %d escapes", pinned, 2000-pinned, escapes)
	if escapes != 0 {
		t.Errorf("%d pins showed the host directory", escapes)
	}
}

func TestRelease(t *testing.T) {
	requireRoot(t)
	root, _ := tree(t)
	dir := filepath.Join(t.TempDir(), "staged")
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"dir", "dir/file", "dir"} {
		if _, err := d.Pin(root, rel, Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := mountsBelow(t, dir); n != 3 {
		t.Errorf("%d mounts, want 3", n)
	}
	// Reopened (after a restart of the daemon), new entries do not take
	// the names of old ones.
	d2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d2.Pin(root, "dir", Options{}); err != nil {
		t.Fatal(err)
	}
	if err := Release(dir); err != nil {
		t.Fatal(err)
	}
	if n := mountsBelow(t, dir); n != 0 {
		t.Errorf("%d mounts left", n)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging directory still there: %v", err)
	}
	// What was pinned is untouched.
	if b, err := os.ReadFile(filepath.Join(root, "dir", "file")); err != nil || string(b) != "inside" {
		t.Errorf("pinned file after release: %q, %v", b, err)
	}
	if err := Release(dir); err != nil {
		t.Errorf("second release: %v", err)
	}
	// A staging directory that is a link is refused.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(link); err == nil {
		t.Error("Open followed a symbolic link")
	}
}

// FuzzPin: whatever path a Revision gives as subPath, a pin is refused or
// shows a file of the volume: never anything outside it.
func FuzzPin(f *testing.F) {
	for _, s := range []string{"", "dir", "dir/file", "in-rel", "out-abs", "out-rel", "../host", "/etc", "dir/../../host/marker", "a//b", ".", "..", "in-dir/../out-abs", "sock", "fifo", "loop"} {
		f.Add(s, true)
	}
	requireRoot(f)
	root, _ := tree(f)
	inside := map[[2]uint64]bool{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		inside[[2]uint64{st.Dev, st.Ino}] = true
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	d := openDir(f)
	f.Fuzz(func(t *testing.T, rel string, follow bool) {
		p, err := d.Pin(root, rel, Options{FollowSymlinks: follow})
		if err != nil {
			return
		}
		defer func() {
			_ = unmountAll(p)
			removeEntry(p)
		}()
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		if !inside[[2]uint64{st.Dev, st.Ino}] {
			t.Fatalf("Pin(%q) shows a file outside the root", rel)
		}
	})
}

// TestPinMakesDirs: with MakeDirs, what is missing of the path is made (an
// emptyDir's subPath, as the kubelet makes it), with the mode asked for,
// and never through a link.
func TestPinMakesDirs(t *testing.T) {
	requireRoot(t)
	root, host := tree(t)
	d := openDir(t)
	p, err := d.Pin(root, "new/deeper", Options{MakeDirs: 0o777 | os.ModeSticky})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"new", "new/deeper"} {
		fi, err := os.Lstat(filepath.Join(root, q))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
			t.Errorf("%s: %v, %v; want a directory with mode 1777", q, fi, err)
		}
	}
	if err := os.WriteFile(filepath.Join(p, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "new", "deeper", "f")); err != nil {
		t.Errorf("the pin does not show the directory made: %v", err)
	}
	// An existing path is pinned as it is; links are not followed when a
	// part is missing.
	if _, err := d.Pin(root, "dir/sub", Options{MakeDirs: 0o755}); err != nil {
		t.Error(err)
	}
	for _, rel := range []string{"out-abs/made", "in-dir/made", "dir/file/made"} {
		if _, err := d.Pin(root, rel, Options{FollowSymlinks: true, MakeDirs: 0o755}); err == nil || !strings.Contains(err.Error(), "not a directory") && !strings.Contains(err.Error(), "leads out") {
			t.Errorf("Pin(%q) made through a link or a file: %v", rel, err)
		}
	}
	if ents, _ := os.ReadDir(host); len(ents) != 1 {
		t.Errorf("the host directory holds %d entries", len(ents))
	}
}

// BenchmarkPin is what pinning adds to a container start, per host path:
// openat2, a bind mount and the check (Release, at teardown, is not on the
// start's path: BenchmarkRelease).
func BenchmarkPin(b *testing.B) {
	requireRoot(b)
	root, _ := tree(b)
	dir := filepath.Join(b.TempDir(), "staged")
	d, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = Release(dir) })
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if n++; n%8 == 0 { // a container's worth of paths, then a fresh directory
			b.StopTimer()
			if err := Release(dir); err != nil {
				b.Fatal(err)
			}
			if d, err = Open(dir); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		if _, err := d.Pin(root, "in-rel", Options{FollowSymlinks: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRelease is the teardown's cost per pinned path: a lazy unmount
// and the entry's removal.
func BenchmarkRelease(b *testing.B) {
	requireRoot(b)
	root, _ := tree(b)
	dir := filepath.Join(b.TempDir(), "staged")
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		d, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := d.Pin(root, "in-rel", Options{FollowSymlinks: true}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := Release(dir); err != nil {
			b.Fatal(err)
		}
	}
}
