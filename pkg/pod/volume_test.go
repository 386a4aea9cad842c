package pod

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteVolume(t *testing.T) {
	dir := t.TempDir()
	read := func(p string) (string, os.FileMode) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(filepath.Join(dir, p))
		return string(b), fi.Mode().Perm()
	}
	v1 := map[string]File{"a": {[]byte("1"), 0o644}, "sub/b": {[]byte("22"), 0o600}}
	if changed, err := writeVolume(dir, v1); err != nil || !changed {
		t.Fatalf("first write: %v %v", changed, err)
	}
	if v, m := read("a"); v != "1" || m != 0o644 {
		t.Errorf("a = %q %v", v, m)
	}
	if v, m := read("sub/b"); v != "22" || m != 0o600 {
		t.Errorf("sub/b = %q %v", v, m)
	}
	if l, err := os.Readlink(filepath.Join(dir, "a")); err != nil || l != "..data/a" {
		t.Errorf("a links to %q (%v), want ..data/a", l, err)
	}
	first, _ := os.Readlink(filepath.Join(dir, "..data"))

	if changed, err := writeVolume(dir, v1); err != nil || changed {
		t.Errorf("the same content again: changed %v, %v; want no write", changed, err)
	}
	if now, _ := os.Readlink(filepath.Join(dir, "..data")); now != first {
		t.Errorf("..data moved from %s to %s without a change", first, now)
	}
	for _, v2 := range []map[string]File{
		{"a": {[]byte("one"), 0o644}, "sub/b": {[]byte("22"), 0o600}}, // content
		{"a": {[]byte("one"), 0o640}, "sub/b": {[]byte("22"), 0o600}}, // mode
		{"a": {[]byte("one"), 0o640}, "c": {[]byte("3"), 0o644}},      // a name comes, one goes
	} {
		if changed, err := writeVolume(dir, v2); err != nil || !changed {
			t.Fatalf("update: %v %v", changed, err)
		}
		for p, f := range v2 {
			if v, m := read(p); v != string(f.Data) || m != f.Mode {
				t.Errorf("%s = %q %v, want %q %v", p, v, m, f.Data, f.Mode)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); err == nil {
		t.Error("sub, gone from the source, is still in the volume")
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	// ..data, one data directory, a, c.
	if len(names) != 4 {
		t.Errorf("volume directory holds %v, want ..data, one ..timestamp directory, a and c", names)
	}
	if changed, err := writeVolume(dir, map[string]File{}); err != nil || !changed {
		t.Errorf("emptied: %v %v", changed, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "a")); err == nil {
		t.Error("a still there after the source emptied")
	}
	for _, bad := range []map[string]File{
		{"../x": {}}, {"/abs": {}}, {"..data": {}}, {"a/./b": {}}, {"p": {}, "p/q": {}}, {"": {}},
	} {
		if _, err := writeVolume(dir, bad); err == nil {
			t.Errorf("writeVolume(%v): no error", bad)
		}
	}
}

// FuzzWriteVolume: whatever file paths and data a volume is given, writing
// it either refuses them or puts every file inside the volume's directory,
// and a second write of the same content changes nothing.
func FuzzWriteVolume(f *testing.F) {
	f.Add("a/b.txt", []byte("v"), uint32(0o644))
	f.Add("../escape", []byte("v"), uint32(0o600))
	f.Add("..data", []byte("v"), uint32(0o600))
	f.Add("/abs", []byte(""), uint32(0o7777))
	f.Add("a/../../b", []byte("x"), uint32(0o7777))
	f.Add("./a//b/", []byte("x"), uint32(0))
	f.Fuzz(func(t *testing.T, p string, data []byte, mode uint32) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "vol")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		files := map[string]File{p: {Data: data, Mode: os.FileMode(mode) & 0o777}}
		changed, err := writeVolume(dir, files)
		if err != nil {
			return // refused, not written outside
		}
		if !changed {
			t.Fatalf("first write reported no change")
		}
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 || ents[0].Name() != "vol" {
			t.Fatalf("path %q wrote outside the volume: %v", p, ents)
		}
		if changed, err := writeVolume(dir, files); err != nil || changed {
			t.Fatalf("second write of the same content: changed %v, %v", changed, err)
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil || string(b) != string(data) {
			t.Fatalf("%s through the volume's links: %q, %v; want %q", p, b, err, data)
		}
		if strings.HasPrefix(p, "..") {
			t.Fatalf("path %q starting with '..' was written", p)
		}
	})
}

func TestResolvConf(t *testing.T) {
	dir := t.TempDir()
	etc, resolved := filepath.Join(dir, "etc"), filepath.Join(dir, "resolved")
	orig := resolvConfFiles
	resolvConfFiles = []string{etc, resolved}
	t.Cleanup(func() { resolvConfFiles = orig })
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	write(etc, "# comment\nnameserver 192.0.2.1\nnameserver 127.0.0.1\nsearch example.test\noptions ndots:2\n")
	if got, want := resolvConf(nil), "nameserver 192.0.2.1\nsearch example.test\noptions ndots:2\n"; got != want {
		t.Errorf("host servers:\n%s\nwant\n%s", got, want)
	}
	if got, want := resolvConf([]string{"192.0.2.9", "2001:db8::9"}), "nameserver 192.0.2.9\nnameserver 2001:db8::9\nsearch example.test\noptions ndots:2\n"; got != want {
		t.Errorf("configured servers:\n%s\nwant\n%s", got, want)
	}
	// systemd-resolved: only its stub on loopback in /etc/resolv.conf.
	write(etc, "nameserver 127.0.0.53\nsearch lan.test\n")
	write(resolved, "nameserver 192.0.2.2\nsearch other.test\n")
	if got, want := resolvConf(nil), "nameserver 192.0.2.2\nsearch lan.test\n"; got != want {
		t.Errorf("behind systemd-resolved:\n%s\nwant\n%s", got, want)
	}
	os.Remove(resolved)
	if got := resolvConf(nil); !strings.HasPrefix(got, "# knbox: no name server") {
		t.Errorf("no reachable server: %q", got)
	}
}
