package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/build/gittest"
)

// TestBuildGitSource: a Build with source.git clones the repository (git's
// smart HTTP protocol, served by the test on a loopback address relayed
// into the build's network namespace) into /workspace before its first
// step, at the remote's HEAD or at a tag; a repository the build cannot
// reach fails the Build with GitCloneFailed naming the URL, also when the
// host itself reaches it (a server on the host's loopback that is not
// relayed: the clone has the build's network view, not the host's).
func TestBuildGitSource(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app.git")
	repo.Commit("one", map[string]string{"hello.txt": "hello from v1"})
	repo.Run("tag", "-a", "-m", "first", "v1")
	repo.Commit("two", map[string]string{"hello.txt": "hello from git", "bin/run.sh*": "#!/bin/sh\necho run\n"})
	relayed := gittest.Serve(t, root)
	hostOnly := gittest.Serve(t, root) // the host reaches it; builds must not
	e := newBuildEnv(t, relayed)

	build := func(name, url, rev, script string) {
		t.Helper()
		revLine := ""
		if rev != "" {
			revLine = "\n      revision: " + rev
		}
		e.k.must(fmt.Sprintf(`apiVersion: build.knative.dev/v1alpha1
kind: Build
metadata:
  name: %s
spec:
  timeout: 3m
  source:
    git:
      url: %s%s
  steps:
  - name: check
    image: %s
    command: ["sh", "-c", %q]
`, name, url, revLine, e.fetch, script), "apply", "-f", "-")
	}
	build("git-head", "http://"+relayed+"/app.git", "",
		`cat hello.txt; test "$(cat /workspace/hello.txt)" = 'hello from git' && test -x bin/run.sh`)
	build("git-tag", "http://"+relayed+"/app.git", "v1", `test "$(cat /workspace/hello.txt)" = 'hello from v1'`)
	build("git-host-only", "http://"+hostOnly+"/app.git", "", "true")
	build("git-missing", "http://"+relayed+"/nothing.git", "", "true")

	for _, name := range []string{"git-head", "git-tag"} {
		e.waitCond(t, "build/"+name, `{.status.conditions[?(@.type=="Succeeded")].status}`, "True", 3*time.Minute)
	}
	if logs := e.k.must("", "get", "--raw", "/apis/build.knative.dev/v1alpha1/namespaces/default/builds/git-head/log"); !strings.Contains(logs, "hello from git") {
		t.Errorf("git-head log:\n%s", logs)
	}
	for name, url := range map[string]string{"git-host-only": "http://" + hostOnly + "/app.git", "git-missing": "http://" + relayed + "/nothing.git"} {
		e.waitCond(t, "build/"+name, `{.status.conditions[?(@.type=="Succeeded")].reason}`, "GitCloneFailed", 3*time.Minute)
		msg := e.k.must("", "get", "build/"+name, "-o", `jsonpath={.status.conditions[?(@.type=="Succeeded")].message}`)
		if !strings.Contains(msg, url) || !strings.Contains(msg, "unreachable") {
			t.Errorf("%s: message %q, want one naming %s and saying it was unreachable", name, msg, url)
		}
		if st := e.k.must("", "get", "build/"+name, "-o", `jsonpath={.status.conditions[?(@.type=="Succeeded")].status}`); st != "False" {
			t.Errorf("%s: Succeeded %q, want False", name, st)
		}
	}

	// A bad git source is refused at admission, naming the field.
	out, err := e.k.run(fmt.Sprintf(`apiVersion: build.knative.dev/v1alpha1
kind: Build
metadata:
  name: git-bad
spec:
  source:
    git:
      url: file:///etc
  steps:
  - name: check
    image: %s
`, e.fetch), "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "spec.source.git.url") {
		t.Errorf("a file:// git URL: %v\n%s", err, out)
	}
}
