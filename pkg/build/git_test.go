package build

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	buildv1alpha1 "github.com/knbox/knbox/pkg/apis/build/v1alpha1"
	"github.com/knbox/knbox/pkg/build/gittest"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/network"
	"github.com/knbox/knbox/pkg/pod"
	"golang.org/x/sys/unix"
)

// hostView dials as the host does: the unit tests' stand-in for a pod's
// network namespace (the e2e test uses the real one).
func hostView() *netView {
	return &netView{
		dial: (&net.Dialer{}).DialContext,
		lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		},
	}
}

var testArchiveLimits = image.ArchiveLimits{What: "git checkout", MaxBytes: 1 << 20, MaxFiles: 100,
	BytesKey: "builds.maxSourceBytes", FilesKey: "builds.maxSourceFiles"}

func TestCloneGit(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app.git")
	first := repo.Commit("one", map[string]string{"hello.txt": "v1\n"})
	repo.Run("tag", "v1")
	second := repo.Commit("two", map[string]string{"hello.txt": "v2\n", "bin/run.sh*": "#!/bin/sh\n", "link": "->hello.txt", "escape": "->../../../etc/passwd"})
	repo.Run("checkout", "-q", "-b", "feature")
	repo.Commit("three", map[string]string{"hello.txt": "feature\n"})
	repo.Run("checkout", "-q", "main")
	url := "http://" + gittest.Serve(t, root) + "/app.git"

	for _, tc := range []struct {
		rev, want string
	}{
		{"", "v2\n"}, {"main", "v2\n"}, {"feature", "feature\n"}, {"v1", "v1\n"}, {"refs/tags/v1", "v1\n"},
		{first, "v1\n"}, {first[:10], "v1\n"}, {second, "v2\n"},
	} {
		t.Run("rev="+tc.rev, func(t *testing.T) {
			dir := t.TempDir()
			err := cloneGit(context.Background(), buildv1alpha1.GitSourceSpec{URL: url, Revision: tc.rev}, hostView(),
				GitLimits{Timeout: time.Minute}, testArchiveLimits, t.TempDir(), dir)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "hello.txt")); err != nil || string(b) != tc.want {
				t.Fatalf("hello.txt = %q, %v; want %q", b, err, tc.want)
			}
			if tc.want != "v2\n" {
				return
			}
			if fi, err := os.Stat(filepath.Join(dir, "bin/run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
				t.Errorf("bin/run.sh: %v %v, want executable", fi, err)
			}
			if target, err := os.Readlink(filepath.Join(dir, "link")); err != nil || target != "hello.txt" {
				t.Errorf("link -> %q, %v", target, err)
			}
			if _, err := os.Stat(filepath.Join(dir, ".git")); !os.IsNotExist(err) {
				t.Errorf(".git in the workspace: %v", err)
			}
		})
	}

	errCases := []struct {
		name string
		src  buildv1alpha1.GitSourceSpec
		lim  GitLimits
		alim image.ArchiveLimits
		want string
	}{
		{"unknown revision", buildv1alpha1.GitSourceSpec{URL: url, Revision: "nope"}, GitLimits{}, testArchiveLimits, `revision "nope" is no branch, tag or commit`},
		{"unknown commit", buildv1alpha1.GitSourceSpec{URL: url, Revision: strings.Repeat("ab", 20)}, GitLimits{}, testArchiveLimits, "is no commit"},
		{"fetch budget", buildv1alpha1.GitSourceSpec{URL: url}, GitLimits{MaxFetchBytes: 100}, testArchiveLimits, "builds.maxGitFetchBytes"},
		{"too many files", buildv1alpha1.GitSourceSpec{URL: url}, GitLimits{}, image.ArchiveLimits{What: "git checkout", MaxBytes: 1 << 20, MaxFiles: 2, FilesKey: "builds.maxSourceFiles"}, "builds.maxSourceFiles"},
		{"too many bytes", buildv1alpha1.GitSourceSpec{URL: url}, GitLimits{}, image.ArchiveLimits{What: "git checkout", MaxBytes: 4, MaxFiles: 100, BytesKey: "builds.maxSourceBytes"}, "builds.maxSourceBytes"},
		{"no such repository", buildv1alpha1.GitSourceSpec{URL: url + "/nothing"}, GitLimits{}, testArchiveLimits, "unreachable"},
		{"file scheme", buildv1alpha1.GitSourceSpec{URL: "file://" + repo.Dir}, GitLimits{}, testArchiveLimits, "http and https"},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			err := cloneGit(context.Background(), tc.src, hostView(), tc.lim, tc.alim, t.TempDir(), t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.src.URL) {
				t.Fatalf("err = %v, want one naming %s and saying %q", err, tc.src.URL, tc.want)
			}
		})
	}

	t.Run("timeout", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		src := buildv1alpha1.GitSourceSpec{URL: "http://" + ln.Addr().String() + "/app.git"}
		err = cloneGit(context.Background(), src, hostView(), GitLimits{Timeout: 200 * time.Millisecond}, testArchiveLimits, t.TempDir(), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "builds.gitTimeout") {
			t.Fatalf("err = %v, want builds.gitTimeout", err)
		}
	})

	t.Run("no network view", func(t *testing.T) {
		// go-git's http transport, as knbox installs it, dials nothing
		// without a clone's network view.
		installGitTransport()
		if _, err := dialFromContext(context.Background(), "tcp", strings.TrimPrefix(url, "http://")[:strings.Index(strings.TrimPrefix(url, "http://"), "/")]); err == nil {
			t.Fatal("dialled without a network view")
		}
	})
}

// TestGitSeedNetworkView: the clone dials from inside the pod's network
// namespace: a server on the host's loopback is unreachable, until it is
// relayed into the namespace as the builds' registries are.
func TestGitSeedNetworkView(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (CAP_SYS_ADMIN); CI runs as root")
		}
		t.Skip("needs root (CAP_SYS_ADMIN)")
	}
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app.git")
	repo.Commit("one", map[string]string{"hello.txt": "hi"})
	addr := gittest.Serve(t, root)
	src := buildv1alpha1.GitSourceSpec{URL: "http://" + addr + "/app.git"}

	nsRoot := filepath.Join(t.TempDir(), "netns")
	t.Cleanup(func() { _ = unix.Unmount(nsRoot, unix.MNT_DETACH) })
	ns, err := network.CreateIn(nsRoot, "build-git-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Delete() })
	fill := gitSeed(src, GitLimits{Timeout: time.Minute}, testArchiveLimits, t.TempDir())
	ctx := context.Background()

	err = fill(ctx, t.TempDir(), pod.SeedNet{NS: ns})
	if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), src.URL) {
		t.Fatalf("a clone of the host's loopback: %v, want unreachable", err)
	}
	hostName := buildv1alpha1.GitSourceSpec{URL: "http://localhost.invalid:1/app.git"}
	err = gitSeed(hostName, GitLimits{Timeout: time.Minute}, testArchiveLimits, t.TempDir())(ctx, t.TempDir(), pod.SeedNet{NS: ns})
	if err == nil || !strings.Contains(err.Error(), "no name server") {
		t.Fatalf("a name without name servers: %v", err)
	}

	f, err := Forward(ns, []netip.AddrPort{netip.MustParseAddrPort(addr)}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	if err := fill(ctx, dir, pod.SeedNet{NS: ns}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "hello.txt")); err != nil || string(b) != "hi" {
		t.Fatalf("hello.txt = %q, %v", b, err)
	}
}
