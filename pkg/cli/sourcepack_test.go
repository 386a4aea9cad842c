package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
)

// TestIgnoreRules: the subset of .gitignore that deploy --source reads.
func TestIgnoreRules(t *testing.T) {
	t.Parallel()
	rules, err := parseIgnore(".knboxignore", strings.NewReader(`# comment

*.log
!keep.log
build/
/top.txt
docs/*.md
**/gen/out
node_modules
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		dir  bool
		want bool
	}{
		{"a.log", false, true},
		{"x/y/b.log", false, true},
		{"keep.log", false, false},
		{"x/keep.log", false, false},
		{"build", true, true},
		{"x/build", true, true},
		{"build", false, false}, // a file: build/ is for directories
		{"top.txt", false, true},
		{"x/top.txt", false, false}, // anchored
		{"docs/a.md", false, true},
		{"docs/x/a.md", false, false}, // * does not cross /
		{"x/docs/a.md", false, false},
		{"gen/out", false, true},
		{"a/b/gen/out", false, true},
		{"node_modules", true, true},
		{"main.go", false, false},
	} {
		if got := rules.ignored(c.path, c.dir); got != c.want {
			t.Errorf("ignored(%q, dir=%v) = %v, want %v", c.path, c.dir, got, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"a\n[\n", `.knboxignore:2: "["`},
		{"/\n", `.knboxignore:1: "/" matches nothing`},
		{strings.Repeat("x", maxIgnoreBytes+1), "larger than"},
		{strings.Repeat("x\n", maxIgnorePatterns+1), "more than"},
	} {
		if _, err := parseIgnore(".knboxignore", strings.NewReader(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseIgnore(%.20q): %v, want %q", c.in, err, c.want)
		}
	}
}

// TestPackSource: DIR's files, directories and symlinks, without .git and
// what .knboxignore (else .gitignore) names.
func TestPackSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(p, body string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("main.go", "package main\n", 0o644)
	write("bin/app", "ELF", 0o755)
	write(".git/HEAD", "ref", 0o644)
	write("tmp/x.log", "noise", 0o644)
	write(".gitignore", "*.go\n", 0o644) // not read: .knboxignore wins
	write(IgnoreFile, "tmp/\n", 0o644)
	if err := os.Symlink("bin/app", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	st, err := packSource(dir, &buf)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	got := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	var names []string
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{".gitignore", IgnoreFile, "bin/", "bin/app", "link", "main.go"}
	if !slices.Equal(names, want) {
		t.Errorf("archive holds %q, want %q", names, want)
	}
	if h := got["bin/app"]; h == nil || h.Mode&0o111 == 0 || h.Size != 3 {
		t.Errorf("bin/app: %+v", h)
	}
	if h := got["link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "bin/app" {
		t.Errorf("link: %+v", h)
	}
	if st.files != 5 || st.skipped != 2 {
		t.Errorf("stats %+v", st)
	}
	// .gitignore applies without a .knboxignore.
	if err := os.Remove(filepath.Join(dir, IgnoreFile)); err != nil {
		t.Fatal(err)
	}
	if st, err := packSource(dir, io.Discard); err != nil || st.skipped != 2 || st.files != 4 { // .git and main.go out; tmp/x.log in
		t.Errorf("with .gitignore: %+v, %v", st, err)
	}
}

// TestBuiltDigest: the Service runs what the builder says it pushed, by
// digest; without one, the build's own tag.
func TestBuiltDigest(t *testing.T) {
	t.Parallel()
	d := "sha256:" + strings.Repeat("ab", 32)
	b := &buildv1alpha1.Build{Status: buildv1alpha1.BuildStatus{StepStates: []corev1.ContainerState{
		{Terminated: &corev1.ContainerStateTerminated{Message: "127.0.0.1:5000/default/app@" + d}}}}}
	if got := builtDigest(b); got != d {
		t.Errorf("builtDigest = %q", got)
	}
	if img := serviceImage("default", "app", "build-1", builtDigest(b)); img != "registry.knbox.local/default/app@"+d {
		t.Errorf("serviceImage = %q", img)
	}
	b.Status.StepStates[0].Terminated.Message = "done"
	if img := serviceImage("default", "app", "build-1", builtDigest(b)); img != "registry.knbox.local/default/app:build-1" {
		t.Errorf("serviceImage without a digest = %q", img)
	}
}

// FuzzParseIgnore: any ignore file parses or fails with an error naming
// it; what parses matches any path without panicking.
func FuzzParseIgnore(f *testing.F) {
	for _, s := range []string{"*.log\n!keep.log\nbuild/\n/top\n**/gen/x\n", "[", "\\", "!\n/\n**/\n", "a/**/b\n", "\xff\x00\r\n# x\n"} {
		f.Add(s, "a/b/c.log", true)
	}
	f.Fuzz(func(t *testing.T, file, p string, dir bool) {
		rules, err := parseIgnore(".knboxignore", strings.NewReader(file))
		if err != nil {
			if !strings.HasPrefix(err.Error(), ".knboxignore") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		_ = rules.ignored(p, dir)
	})
}

// TestPruneBuilds: the ended Builds of a Service's deploys but the newest
// keepBuilds go; running ones, the current one and other Services' stay.
func TestPruneBuilds(t *testing.T) {
	t.Parallel()
	var objs []runtime.Object
	mk := func(name, svc string, age int, done bool) {
		b := &buildv1alpha1.Build{
			TypeMeta: metav1.TypeMeta{APIVersion: buildGV.String(), Kind: "Build"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{DeployLabel: svc},
				CreationTimestamp: metav1.NewTime(time.Unix(int64(1000-age), 0))},
		}
		if done {
			b.Status.MarkSucceeded()
		}
		o, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: o})
	}
	for i := 0; i < 8; i++ {
		mk(fmt.Sprintf("app-%d", i), "app", i, i != 6)
	}
	mk("other-0", "other", 100, true)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{buildGVR: "BuildList"}, objs...)
	pruneBuilds(context.Background(), dyn, "default", "app", "app-0")
	list, err := dyn.Resource(buildGVR).Namespace("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, u := range list.Items {
		left = append(left, u.GetName())
	}
	slices.Sort(left)
	if want := []string{"app-0", "app-1", "app-2", "app-3", "app-4", "app-6", "other-0"}; !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
}
