// Package gittest makes git repositories and serves them over git's smart
// HTTP protocol (git http-backend, as a CGI), for the tests of source.git.
// It needs the git binary: without it, tests skip, or fail in CI.
package gittest

import (
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Git returns the git binary's path (a skip without it; a failure in CI).
func Git(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("git")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git is required in CI: %v", err)
		}
		t.Skipf("git not found: %v", err)
	}
	return p
}

// Repo is a repository under a served root.
type Repo struct {
	t   testing.TB
	git string
	// Dir is its work tree.
	Dir string
}

// NewRepo makes an empty repository named name (e.g. "app.git") under root,
// with its default branch "main".
func NewRepo(t testing.TB, root, name string) *Repo {
	t.Helper()
	r := &Repo{t: t, git: Git(t), Dir: filepath.Join(root, name)}
	r.Run("init", "-q", "-b", "main", r.Dir)
	return r
}

// Run runs git in the repository and returns its output.
func (r *Repo) Run(args ...string) string {
	r.t.Helper()
	cmd := exec.Command(r.git, args...)
	if args[0] != "init" {
		cmd.Dir = r.Dir
	}
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+r.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Commit writes files (path -> content; a content starting with "->" is a
// symlink to the rest, a path ending in "*" an executable), commits them
// all and returns the commit's hash.
func (r *Repo) Commit(msg string, files map[string]string) string {
	r.t.Helper()
	for p, c := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, "*") {
			p, mode = strings.TrimSuffix(p, "*"), 0o755
		}
		full := filepath.Join(r.Dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			r.t.Fatal(err)
		}
		_ = os.Remove(full)
		var err error
		if target, ok := strings.CutPrefix(c, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(c), mode)
		}
		if err != nil {
			r.t.Fatal(err)
		}
	}
	r.Run("add", "-A")
	r.Run("commit", "-q", "-m", msg)
	return r.Run("rev-parse", "HEAD")
}

// Serve serves the repositories under root over smart HTTP on a loopback
// port, http://ADDR/NAME, until the test ends, and returns ADDR.
func Serve(t testing.TB, root string) string {
	t.Helper()
	h := &cgi.Handler{
		Path:   Git(t),
		Args:   []string{"http-backend"},
		Env:    []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root},
		Stderr: io.Discard, // "Not a git repository" for the tests' missing ones
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}
