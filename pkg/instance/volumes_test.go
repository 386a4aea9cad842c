package instance

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
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
	v1 := map[string]volumeFile{"a": {[]byte("1"), 0o644}, "sub/b": {[]byte("22"), 0o600}}
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
	for _, v2 := range []map[string]volumeFile{
		{"a": {[]byte("one"), 0o644}, "sub/b": {[]byte("22"), 0o600}}, // content
		{"a": {[]byte("one"), 0o640}, "sub/b": {[]byte("22"), 0o600}}, // mode
		{"a": {[]byte("one"), 0o640}, "c": {[]byte("3"), 0o644}},      // a name comes, one goes
	} {
		if changed, err := writeVolume(dir, v2); err != nil || !changed {
			t.Fatalf("update: %v %v", changed, err)
		}
		for p, f := range v2 {
			if v, m := read(p); v != string(f.data) || m != f.mode {
				t.Errorf("%s = %q %v, want %q %v", p, v, m, f.data, f.mode)
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
	if changed, err := writeVolume(dir, map[string]volumeFile{}); err != nil || !changed {
		t.Errorf("emptied: %v %v", changed, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "a")); err == nil {
		t.Error("a still there after the source emptied")
	}
}

// TestVolumesFollowTheirSources: a running instance's Secret, ConfigMap
// and projected volumes change when their sources do, as on Kubernetes,
// without a restart.
func TestVolumesFollowTheirSources(t *testing.T) {
	// Not under the process handler, which mounts no volumes.
	for _, h := range []string{"runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h}, func(o *Options) { o.VolumeSyncPeriod = 50 * time.Millisecond })
			setSecret := func(data map[string]string) {
				e.lookup.mu.Lock()
				defer e.lookup.mu.Unlock()
				s := &corev1.Secret{Data: map[string][]byte{}}
				for k, v := range data {
					s.Data[k] = []byte(v)
				}
				e.lookup.secrets["ns1/creds"] = s
			}
			setSecret(map[string]string{"password": "one"})
			e.lookup.cms["ns1/settings"] = &corev1.ConfigMap{Data: map[string]string{"mode": "fast"}}
			name := uniqueName("vol-" + h)
			rev := newRev(t, "ns1", name, h, ref, func(r *servingv1.Revision) {
				c := &r.Spec.Containers[0]
				c.VolumeMounts = []corev1.VolumeMount{
					{Name: "creds", MountPath: "/etc/creds", ReadOnly: true},
					{Name: "proj", MountPath: "/etc/proj", ReadOnly: true},
				}
				r.Spec.Volumes = []corev1.Volume{
					{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
					{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
						{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Items: []corev1.KeyToPath{{Key: "password", Path: "pw/password"}}}},
						{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}},
					}}}},
				}
			})
			e.resolveAndEnsure(rev)
			e.waitState(rev, time.Minute, "ready", ready)
			eps := e.m.Endpoints("ns1", name)
			if len(eps) != 1 {
				t.Fatalf("%d endpoints, want 1", len(eps))
			}
			started := getInfo(t, eps[0]).Started
			// Which of the volumes' names the container sees.
			seen := func() map[string]bool {
				var i struct {
					Files []struct {
						Path   string `json:"path"`
						Exists bool   `json:"exists"`
					} `json:"files"`
				}
				paths := []string{"/etc/creds/password", "/etc/creds/token", "/etc/proj/pw/password", "/etc/proj/mode"}
				if err := json.Unmarshal(get(t, eps[0], "/?path="+strings.Join(paths, "&path=")), &i); err != nil {
					t.Fatal(err)
				}
				out := map[string]bool{}
				for _, f := range i.Files {
					if slices.Contains(paths, f.Path) && f.Exists {
						out[f.Path] = true
					}
				}
				return out
			}
			if got := seen(); len(got) != 3 || got["/etc/creds/token"] {
				t.Fatalf("volumes at start: %v, want password (creds and proj) and mode", got)
			}
			before := readThrough(t, e, name, "creds", "password")
			if before != "one" {
				t.Fatalf("creds/password = %q, want one", before)
			}
			setSecret(map[string]string{"password": "second-value", "token": "t"})
			// One sync pass writes the volumes one after the other: wait
			// for the last one too.
			eventually(t, 30*time.Second, "the container to see the new secret", func() bool {
				return seen()["/etc/creds/token"] && readThrough(t, e, name, "proj", "pw/password") == "second-value"
			})
			if got := readThrough(t, e, name, "creds", "password"); got != "second-value" {
				t.Errorf("creds/password = %q after the update, want second-value", got)
			}
			if got := readThrough(t, e, name, "proj", "pw/password"); got != "second-value" {
				t.Errorf("proj/pw/password = %q after the update, want second-value", got)
			}
			setSecret(map[string]string{"password": "third"})
			eventually(t, 30*time.Second, "the container to see the token go", func() bool {
				return !seen()["/etc/creds/token"]
			})
			if now := getInfo(t, eps[0]).Started; !now.Equal(started) {
				t.Errorf("the container restarted (%v, then %v): volumes must change in place", started, now)
			}
		})
	}
}

// readThrough reads a volume's file through the container's view: the
// runtime-info answer has no file contents, so this reads the instance's
// volume directory on the host, which the container's mount shows.
func readThrough(t *testing.T, e *env, rev, volume, p string) string {
	t.Helper()
	e.m.mu.Lock()
	r := e.m.revs[key{"ns1", rev}]
	e.m.mu.Unlock()
	if r == nil {
		t.Fatalf("revision %s not found", rev)
	}
	r.mu.Lock()
	var dirs []string
	for _, in := range r.instances {
		dirs = append(dirs, in.dir)
	}
	r.mu.Unlock()
	if len(dirs) != 1 {
		t.Fatalf("%d instances, want 1", len(dirs))
	}
	idx := map[string]string{"creds": "0", "proj": "1"}[volume]
	b, err := os.ReadFile(filepath.Join(dirs[0], "volumes", idx, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FuzzVolumeItems: whatever item paths and data a Secret or ConfigMap
// volume names (they come from the API), writing the volume either refuses
// them or puts every file inside the volume's directory, and a second
// write of the same content changes nothing.
func FuzzVolumeItems(f *testing.F) {
	f.Add("key", "a/b.txt", []byte("v"), int32(0o644))
	f.Add("key", "../escape", []byte("v"), int32(0o600))
	f.Add("key", "..data", []byte("v"), int32(0o600))
	f.Add("key", "/abs", []byte(""), int32(-1))
	f.Add("key", "a/../../b", []byte("x"), int32(0o7777))
	f.Add("key", "./a//b/", []byte("x"), int32(0))
	f.Fuzz(func(t *testing.T, key, itemPath string, data []byte, mode int32) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "vol")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		files := map[string]volumeFile{}
		m := &mode
		err := keyFiles(files, "secret s", map[string][]byte{key: data}, []corev1.KeyToPath{{Key: key, Path: itemPath, Mode: m}}, nil, nil)
		if err != nil {
			return
		}
		changed, err := writeVolume(dir, files)
		if err != nil {
			return // e.g. a path through a file: refused, not written outside
		}
		if !changed {
			t.Fatalf("first write reported no change")
		}
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 || ents[0].Name() != "vol" {
			t.Fatalf("item path %q wrote outside the volume: %v", itemPath, ents)
		}
		if changed, err := writeVolume(dir, files); err != nil || changed {
			t.Fatalf("second write of the same content: changed %v, %v", changed, err)
		}
		for p, want := range files {
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
			if err != nil || string(b) != string(want.data) {
				t.Fatalf("%s through the volume's links: %q, %v; want %q", p, b, err, want.data)
			}
		}
	})
}
