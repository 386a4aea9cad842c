package oci

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func ptr[T any](v T) *T { return &v }

// testRootfs is testdata/rootfs: /etc/passwd and /etc/group only.
func testRootfs(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs("testdata/rootfs")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// baseInput is a valid input that tests change one field of.
func baseInput(t testing.TB) Input {
	return Input{
		Container: corev1.Container{Name: "user-container", Image: "example.com/hello@sha256:0000"},
		Image:     ImageConfig{Entrypoint: []string{"/hello"}, Cmd: []string{"--serve"}, Env: []string{"PATH=/usr/bin:/bin"}},
		Env:       []string{"PORT=8080", "K_SERVICE=hello", "K_CONFIGURATION=hello", "K_REVISION=hello-00001"},
		Rootfs:    testRootfs(t),
		Hostname:  "hello-00001-1",
	}
}

func mustBuild(t *testing.T, in Input) *specs.Spec {
	t.Helper()
	s, err := Build(in)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return s
}

// buildErr builds in and checks that it fails with a FieldError on field
// whose message contains msg.
func buildErr(t *testing.T, in Input, field, msg string) {
	t.Helper()
	_, err := Build(in)
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("Build: err = %v, want a FieldError on %s", err, field)
	}
	if fe.Field != field || !strings.Contains(fe.Message, msg) {
		t.Fatalf("Build: err = %q, want field %s and a message with %q", err, field, msg)
	}
	if !strings.HasPrefix(err.Error(), field+": ") {
		t.Errorf("error %q does not start with the field", err)
	}
}

func TestArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		command, args    []string
		entrypoint, cmd  []string
		want             []string
		wantErrSubstring string
	}{
		{name: "image only", entrypoint: []string{"/hello"}, cmd: []string{"--serve"}, want: []string{"/hello", "--serve"}},
		{name: "cmd only", cmd: []string{"/bin/sh", "-c", "x"}, want: []string{"/bin/sh", "-c", "x"}},
		{name: "command replaces entrypoint and drops cmd", command: []string{"/other"}, entrypoint: []string{"/hello"}, cmd: []string{"--serve"}, want: []string{"/other"}},
		{name: "command and args", command: []string{"/other"}, args: []string{"-v"}, entrypoint: []string{"/hello"}, cmd: []string{"--serve"}, want: []string{"/other", "-v"}},
		{name: "args replace cmd", args: []string{"-v"}, entrypoint: []string{"/hello"}, cmd: []string{"--serve"}, want: []string{"/hello", "-v"}},
		{name: "args without entrypoint", args: []string{"/bin/app", "-v"}, cmd: []string{"--serve"}, want: []string{"/bin/app", "-v"}},
		{name: "expansion in command and args", command: []string{"/bin/$(K_SERVICE)"}, args: []string{"--port=$(PORT)", "$$(PORT)", "$(UNKNOWN)"}, want: []string{"/bin/hello", "--port=8080", "$(PORT)", "$(UNKNOWN)"}},
		{name: "no expansion in the image's cmd", entrypoint: []string{"/hello"}, cmd: []string{"$(PORT)"}, want: []string{"/hello", "$(PORT)"}},
		{name: "nothing to run", wantErrSubstring: "no command"},
		{name: "empty command", command: []string{""}, wantErrSubstring: "no command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := baseInput(t)
			in.Container.Command, in.Container.Args = tt.command, tt.args
			in.Image.Entrypoint, in.Image.Cmd = tt.entrypoint, tt.cmd
			if tt.wantErrSubstring != "" {
				buildErr(t, in, "command", tt.wantErrSubstring)
				return
			}
			if got := mustBuild(t, in).Process.Args; !slices.Equal(got, tt.want) {
				t.Errorf("args = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	t.Parallel()
	m := map[string]string{"A": "a", "EMPTY": "", "B": "$(A)"}
	// The kubelet's expansion tests (third_party/forked/golang/expansion).
	for in, want := range map[string]string{
		"":                "",
		"no refs":         "no refs",
		"$(A)":            "a",
		"$(A)$(A)":        "aa",
		"x$(A)y":          "xay",
		"$(EMPTY)":        "",
		"$(B)":            "$(A)", // not recursive
		"$(UNKNOWN)":      "$(UNKNOWN)",
		"$$(A)":           "$(A)",
		"$$$(A)":          "$a",
		"$$$$(A)":         "$$(A)",
		"$(A":             "$(A",
		"$(A$(A)":         "$(A$(A)", // the name is "A$(A"
		"$":               "$",
		"$$":              "$",
		"a$b":             "a$b",
		"$()":             "$()",
		"$(A)$":           "a$",
		"( $(A) )":        "( a )",
		"$(A)$(B)$(NONE)": "a$(A)$(NONE)",
	} {
		if got := expand(in, m); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEnvList: a value's $(NAME) is a variable defined before it.
func TestEnvList(t *testing.T) {
	t.Parallel()
	got := EnvList([]corev1.EnvVar{
		{Name: "REG", Value: "127.0.0.1:5000"},
		{Name: "IMG", Value: "$(REG)/default/app:v1"},
		{Name: "LATER", Value: "$(NEXT) $$(REG)"},
		{Name: "NEXT", Value: "n"},
		{Name: "REG", Value: "$(REG)/x"},
	})
	want := []string{"REG=127.0.0.1:5000", "IMG=127.0.0.1:5000/default/app:v1", "LATER=$(NEXT) $(REG)", "NEXT=n", "REG=127.0.0.1:5000/x"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("EnvList = %q, want %q", got, want)
	}
}

func TestWorkingDir(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ container, image, want, errField string }{
		{want: "/"},
		{image: "/app", want: "/app"},
		{container: "/srv//x/", image: "/app", want: "/srv/x"},
		{container: "rel", errField: "workingDir"},
		{image: "rel", errField: "image.workingDir"},
	} {
		in := baseInput(t)
		in.Container.WorkingDir, in.Image.WorkingDir = tt.container, tt.image
		if tt.errField != "" {
			buildErr(t, in, tt.errField, "absolute")
			continue
		}
		if got := mustBuild(t, in).Process.Cwd; got != tt.want {
			t.Errorf("cwd(%q, %q) = %q, want %q", tt.container, tt.image, got, tt.want)
		}
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	in := baseInput(t)
	in.Env = []string{"PORT=8080", "K_SERVICE=hello", "K_CONFIGURATION=hello", "K_REVISION=hello-00001", "A=1", "B=2", "A=3", "EMPTY="}
	in.Image.Env = []string{"PATH=/image/bin", "B=image", "C=image", "C=image2", "PORT=1"}
	got := mustBuild(t, in).Process.Env
	want := []string{
		"PORT=8080", "K_SERVICE=hello", "K_CONFIGURATION=hello", "K_REVISION=hello-00001",
		"A=3", "B=2", "EMPTY=", // the container's, last value wins, first position kept
		"PATH=/image/bin", "C=image2", // the image's, under the container's
		"HOSTNAME=hello-00001-1", "HOME=/root", // defaults
	}
	if !slices.Equal(got, want) {
		t.Errorf("env =\n%q\nwant\n%q", got, want)
	}

	in = baseInput(t)
	in.Image.Env = nil
	in.Env = append(in.Env, "HOME=/x", "HOSTNAME=mine")
	got = mustBuild(t, in).Process.Env
	if envOf(got, "PATH") != defaultPath || envOf(got, "HOME") != "/x" || envOf(got, "HOSTNAME") != "mine" {
		t.Errorf("defaults: env = %q", got)
	}

	in = baseInput(t)
	in.Env = append(in.Env, "NOEQUALS")
	buildErr(t, in, "env[4]", "NAME=value")
	in = baseInput(t)
	in.Image.Env = []string{"=x"}
	buildErr(t, in, "image.env[0]", "NAME=value")
}

func TestUser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		imageUser  string
		sc         *corev1.SecurityContext
		pod        *corev1.PodSecurityContext
		refuseRoot bool
		refusedBy  string
		want       specs.User
		wantHome   string
		errField   string
		errMsg     string
	}{
		{name: "no user is root", want: specs.User{UID: 0, GID: 0, AdditionalGids: []uint32{0, 10}}, wantHome: "/root"},
		{name: "image numeric user", imageUser: "1000", want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 2000}}, wantHome: "/home/app"},
		{name: "image numeric user and group", imageUser: "1000:1", want: specs.User{UID: 1000, GID: 1, AdditionalGids: []uint32{1, 2000}}, wantHome: "/home/app"},
		{name: "image user name", imageUser: "nobody", want: specs.User{UID: 65534, GID: 65534, AdditionalGids: []uint32{65534}}, wantHome: "/nonexistent"},
		{name: "image user and group names", imageUser: "app:nogroup", want: specs.User{UID: 1000, GID: 65534, AdditionalGids: []uint32{65534, 2000}}, wantHome: "/home/app"},
		{name: "image uid not in passwd", imageUser: "4242", want: specs.User{UID: 4242, GID: 0, AdditionalGids: []uint32{0}}, wantHome: "/"},
		{name: "image unknown user", imageUser: "ghost", errField: "image.user", errMsg: `user "ghost": not found`},
		{name: "image unknown group", imageUser: "app:ghosts", errField: "image.user", errMsg: `group "ghosts": not found`},
		{
			name: "runAsUser wins over the image", imageUser: "nobody",
			sc:   &corev1.SecurityContext{RunAsUser: ptr(int64(1000))},
			want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 2000}}, wantHome: "/home/app",
		},
		{
			name: "container wins over pod",
			sc:   &corev1.SecurityContext{RunAsUser: ptr(int64(65532)), RunAsGroup: ptr(int64(7))},
			pod:  &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(8))},
			want: specs.User{UID: 65532, GID: 7, AdditionalGids: []uint32{7, 2000}}, wantHome: "/home/nonroot",
		},
		{
			name: "pod runAsUser, container runAsGroup",
			sc:   &corev1.SecurityContext{RunAsGroup: ptr(int64(7))},
			pod:  &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000))},
			want: specs.User{UID: 1000, GID: 7, AdditionalGids: []uint32{7, 2000}}, wantHome: "/home/app",
		},
		{
			name: "runAsGroup alone changes the image user's group", imageUser: "app",
			pod:  &corev1.PodSecurityContext{RunAsGroup: ptr(int64(9))},
			want: specs.User{UID: 1000, GID: 9, AdditionalGids: []uint32{9, 2000}}, wantHome: "/home/app",
		},
		{
			name: "runAsUser not in passwd", sc: &corev1.SecurityContext{RunAsUser: ptr(int64(4242))},
			want: specs.User{UID: 4242, GID: 0, AdditionalGids: []uint32{0}}, wantHome: "/",
		},
		{
			name: "supplementalGroups and fsGroup", imageUser: "app",
			pod:  &corev1.PodSecurityContext{SupplementalGroups: []int64{3000, 2000}, FSGroup: ptr(int64(4000))},
			want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 2000, 3000, 4000}}, wantHome: "/home/app",
		},
		{name: "policy refuses the image's root", refuseRoot: true, errField: "image.user", errMsg: "root is refused by the operator's policy; set securityContext.runAsUser"},
		{name: "policy refuses a root USER", imageUser: "root", refuseRoot: true, errField: "image.user", errMsg: `the image's USER "root" is root (uid 0): root is refused`},
		{name: "policy refuses runAsUser 0", imageUser: "app", sc: &corev1.SecurityContext{RunAsUser: ptr(int64(0))}, refuseRoot: true, errField: "securityContext.runAsUser", errMsg: "root is refused by the operator's policy"},
		{name: "policy refuses pod runAsUser 0", pod: &corev1.PodSecurityContext{RunAsUser: ptr(int64(0))}, refuseRoot: true, errField: "spec.securityContext.runAsUser", errMsg: "root is refused"},
		{name: "a runtime refuses root", imageUser: "root", refuseRoot: true, refusedBy: "the process runtime", errField: "image.user", errMsg: "root is refused by the process runtime; set securityContext.runAsUser"},
		{name: "policy lets non-root run", imageUser: "app", refuseRoot: true, want: specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 2000}}, wantHome: "/home/app"},
		{name: "runAsNonRoot with the image's root", sc: &corev1.SecurityContext{RunAsNonRoot: ptr(true)}, errField: "securityContext.runAsNonRoot", errMsg: "runAsNonRoot is true"},
		{name: "pod runAsNonRoot with runAsUser 0", sc: &corev1.SecurityContext{RunAsUser: ptr(int64(0))}, pod: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true)}, errField: "securityContext.runAsUser", errMsg: "runAsNonRoot is true"},
		{name: "runAsNonRoot with a named non-root user", imageUser: "nobody", sc: &corev1.SecurityContext{RunAsNonRoot: ptr(true)}, want: specs.User{UID: 65534, GID: 65534, AdditionalGids: []uint32{65534}}, wantHome: "/nonexistent"},
		{name: "runAsUser out of range", sc: &corev1.SecurityContext{RunAsUser: ptr(int64(-1))}, errField: "securityContext.runAsUser", errMsg: "out of range"},
		{name: "runAsGroup out of range", pod: &corev1.PodSecurityContext{RunAsGroup: ptr(int64(1 << 32))}, errField: "spec.securityContext.runAsGroup", errMsg: "out of range"},
		{name: "supplementalGroups out of range", pod: &corev1.PodSecurityContext{SupplementalGroups: []int64{-5}}, errField: "spec.securityContext.supplementalGroups[0]", errMsg: "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := baseInput(t)
			in.Image.User = tt.imageUser
			in.Container.SecurityContext = tt.sc
			in.PodSecurity = tt.pod
			in.Policy.RefuseRoot, in.Policy.RootRefusedBy = tt.refuseRoot, tt.refusedBy
			if tt.errField != "" {
				buildErr(t, in, tt.errField, tt.errMsg)
				return
			}
			s := mustBuild(t, in)
			if got := s.Process.User; got.UID != tt.want.UID || got.GID != tt.want.GID || !slices.Equal(got.AdditionalGids, tt.want.AdditionalGids) {
				t.Errorf("user = %+v, want %+v", got, tt.want)
			}
			if got := envOf(s.Process.Env, "HOME"); got != tt.wantHome {
				t.Errorf("HOME = %q, want %q", got, tt.wantHome)
			}
		})
	}
}

func TestResolveUser(t *testing.T) {
	t.Parallel()
	root := testRootfs(t)
	for _, tt := range []struct {
		user     string
		uid, gid uint32
		groups   []uint32
		err      string
	}{
		{user: "", uid: 0, gid: 0, groups: []uint32{10}},
		{user: "0", uid: 0, gid: 0, groups: []uint32{10}},
		{user: "1000", uid: 1000, gid: 1000, groups: []uint32{2000}},
		{user: " 1000:1000 ", uid: 1000, gid: 1000, groups: []uint32{2000}},
		{user: "nobody", uid: 65534, gid: 65534},
		{user: "app:app", uid: 1000, gid: 1000, groups: []uint32{2000}},
		{user: "nonroot:extra", uid: 65532, gid: 2000, groups: []uint32{2000}},
		{user: "12345:54321", uid: 12345, gid: 54321},
		{user: "ghost", err: `user "ghost": not found`},
		{user: "app:ghosts", err: `group "ghosts": not found`},
		{user: ":1000", err: "no user before the colon"},
		{user: "1000:", err: "no group after the colon"},
		{user: "4294967295", err: "not found"}, // (uid_t)-1 is no uid: read as a name
		{user: "-1", err: "not found"},
	} {
		uid, gid, groups, err := ResolveUser(root, tt.user)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ResolveUser(%q): err = %v, want %q", tt.user, err, tt.err)
			}
			continue
		}
		if err != nil || uid != tt.uid || gid != tt.gid || !slices.Equal(groups, tt.groups) {
			t.Errorf("ResolveUser(%q) = %d, %d, %v, %v; want %d, %d, %v", tt.user, uid, gid, groups, err, tt.uid, tt.gid, tt.groups)
		}
	}
}

func TestResolveUserWithoutEtcFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir() // a scratch image
	if uid, gid, groups, err := ResolveUser(root, "1000:1000"); err != nil || uid != 1000 || gid != 1000 || groups != nil {
		t.Errorf("numeric user in a scratch image = %d, %d, %v, %v", uid, gid, groups, err)
	}
	if _, _, _, err := ResolveUser(root, "app"); err == nil || !strings.Contains(err.Error(), "no /etc/passwd") {
		t.Errorf("named user in a scratch image: err = %v", err)
	}
	if _, _, _, err := ResolveUser(root, "1000:app"); err == nil || !strings.Contains(err.Error(), "no /etc/group") {
		t.Errorf("named group in a scratch image: err = %v", err)
	}
}

// The image's /etc/passwd is the image's: a symlink cannot make Build read
// the host's.
func TestResolveUserStaysInRootfs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outside := filepath.Join(dir, "host-passwd")
	if err := os.WriteFile(outside, []byte("evil:x:0:0::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{outside, "../../../../../../../../" + outside} {
		root := filepath.Join(dir, fmt.Sprintf("rootfs%d", len(target)))
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(root, "etc/passwd")); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := ResolveUser(root, "evil"); err == nil {
			t.Errorf("symlink %s: the host's passwd was read", target)
		}
	}
}

func TestResolveUserRefusesSpecialFiles(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "etc/passwd"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// A FIFO would block a plain open: this must return at once.
	if _, _, _, err := ResolveUser(root, "app"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("err = %v, want not a regular file", err)
	}
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	caps := func(l ...string) []string {
		out := []string{}
		for _, c := range l {
			out = append(out, "CAP_"+c)
		}
		return out
	}
	docker := caps("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE")
	uid := int64(1000)
	tests := []struct {
		name     string
		add      []corev1.Capability
		drop     []corev1.Capability
		policy   Policy
		nonRoot  bool
		want     []string
		errField string
		errMsg   string
	}{
		{name: "default: restricted's NET_BIND_SERVICE alone", want: caps("NET_BIND_SERVICE")},
		{name: "drop ALL", drop: []corev1.Capability{"ALL"}, want: []string{}},
		{name: "Knative's secure default", drop: []corev1.Capability{"ALL"}, add: []corev1.Capability{"NET_BIND_SERVICE"}, want: caps("NET_BIND_SERVICE")},
		{name: "drop the default", drop: []corev1.Capability{"cap_net_bind_service"}, want: []string{}},
		{name: "add what baseline allows", add: []corev1.Capability{"CHOWN", "cap_setuid"}, want: caps("NET_BIND_SERVICE", "CHOWN", "SETUID")},
		{name: "drop wins over add", drop: []corev1.Capability{"ALL", "NET_BIND_SERVICE"}, add: []corev1.Capability{"NET_BIND_SERVICE"}, want: []string{}},
		{name: "re-add after drop ALL", drop: []corev1.Capability{"all"}, add: []corev1.Capability{"CAP_KILL", "CHOWN"}, want: caps("KILL", "CHOWN")},
		{name: "NET_RAW is not addable by default", add: []corev1.Capability{"NET_RAW"}, errField: "securityContext.capabilities.add[0]", errMsg: "adding NET_RAW is not allowed by the operator's policy"},
		{name: "add beyond the addable", add: []corev1.Capability{"SYS_ADMIN"}, errField: "securityContext.capabilities.add[0]", errMsg: "adding SYS_ADMIN is not allowed"},
		{name: "add ALL", add: []corev1.Capability{"ALL"}, errField: "securityContext.capabilities.add[0]", errMsg: "ALL"},
		{name: "add unknown", add: []corev1.Capability{"NET_BIND_SERVICE", "FLY"}, errField: "securityContext.capabilities.add[1]", errMsg: `unknown capability "FLY"`},
		{name: "drop unknown", drop: []corev1.Capability{"FLY"}, errField: "securityContext.capabilities.drop[0]", errMsg: "unknown capability"},
		{name: "operator allows more", drop: []corev1.Capability{"ALL"}, add: []corev1.Capability{"SYS_PTRACE"}, policy: Policy{AddableCapabilities: []string{"SYS_PTRACE"}}, want: caps("SYS_PTRACE")},
		{name: "operator's list replaces baseline's", add: []corev1.Capability{"CHOWN"}, policy: Policy{AddableCapabilities: []string{"SYS_PTRACE"}}, errField: "securityContext.capabilities.add[0]", errMsg: "allowed: NET_BIND_SERVICE, SYS_PTRACE"},
		{name: "operator allows no add", add: []corev1.Capability{"KILL"}, policy: Policy{AddableCapabilities: []string{}}, errField: "securityContext.capabilities.add[0]", errMsg: "not allowed"},
		{name: "operator's default set", policy: Policy{DefaultCapabilities: []string{"CHOWN", "NET_RAW"}}, want: caps("CHOWN", "NET_RAW")},
		{name: "operator's Docker default set, NET_RAW dropped", policy: Policy{DefaultCapabilities: docker}, drop: []corev1.Capability{"NET_RAW"},
			want: caps("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "SETGID", "SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE")},
		{name: "operator's empty default set", policy: Policy{DefaultCapabilities: []string{}}, want: []string{}},
		{name: "non-root: bounding only", nonRoot: true, add: []corev1.Capability{"KILL"}, want: caps("NET_BIND_SERVICE", "KILL")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := baseInput(t)
			in.Container.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: tt.add, Drop: tt.drop}}
			if tt.nonRoot {
				in.Container.SecurityContext.RunAsUser = &uid
			}
			in.Policy = tt.policy
			if tt.errField != "" {
				buildErr(t, in, tt.errField, tt.errMsg)
				return
			}
			c := mustBuild(t, in).Process.Capabilities
			if !slices.Equal(c.Bounding, tt.want) {
				t.Errorf("bounding = %v, want %v", c.Bounding, tt.want)
			}
			wantEff := tt.want
			if tt.nonRoot {
				// What the kernel leaves a non-root process after exec;
				// runsc applies the sets as they are.
				wantEff = []string{}
			}
			for set, got := range map[string][]string{"effective": c.Effective, "permitted": c.Permitted} {
				if !slices.Equal(got, wantEff) {
					t.Errorf("%s = %v, want %v", set, got, wantEff)
				}
			}
			if len(c.Inheritable) > 0 || len(c.Ambient) > 0 {
				t.Errorf("inheritable %v, ambient %v: want none", c.Inheritable, c.Ambient)
			}
		})
	}
}

func TestCheckCapabilities(t *testing.T) {
	t.Parallel()
	got, err := CheckCapabilities("policy.addableCapabilities", []string{"net_raw", "CAP_CHOWN", "NET_RAW"})
	if err != nil || !slices.Equal(got, []string{"CAP_NET_RAW", "CAP_CHOWN"}) {
		t.Errorf("CheckCapabilities = %v, %v", got, err)
	}
	for _, bad := range []string{"ALL", "FLY", ""} {
		if _, err := CheckCapabilities("policy.addableCapabilities", []string{"KILL", bad}); err == nil || !strings.Contains(err.Error(), "policy.addableCapabilities[1]: unknown capability") {
			t.Errorf("CheckCapabilities(%q) = %v", bad, err)
		}
	}
}

func TestHardeningTheDeveloperCannotTurnOff(t *testing.T) {
	t.Parallel()
	in := baseInput(t)
	in.Container.SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr(true),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
	}
	in.PodSecurity = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
	s := mustBuild(t, in)
	if !s.Process.NoNewPrivileges {
		t.Error("noNewPrivileges is false")
	}
	if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActErrno || len(s.Linux.Seccomp.Syscalls) == 0 {
		t.Errorf("seccomp = %+v, want the default profile", s.Linux.Seccomp)
	}
	if s.Process.Terminal {
		t.Error("terminal is true")
	}
	if s.Hooks != nil || len(s.Linux.Sysctl) > 0 || len(s.Linux.Devices) > 0 || s.Linux.UIDMappings != nil {
		t.Errorf("hooks %v, sysctls %v, devices %v, uid mappings %v: want none", s.Hooks, s.Linux.Sysctl, s.Linux.Devices, s.Linux.UIDMappings)
	}

	for _, tt := range []struct {
		name   string
		modify func(*Input)
		field  string
	}{
		{"privileged", func(in *Input) { in.Container.SecurityContext = &corev1.SecurityContext{Privileged: ptr(true)} }, "securityContext.privileged"},
		{"unmasked proc", func(in *Input) {
			in.Container.SecurityContext = &corev1.SecurityContext{ProcMount: ptr(corev1.UnmaskedProcMount)}
		}, "securityContext.procMount"},
		{"sysctls", func(in *Input) {
			in.PodSecurity = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net.core.somaxconn", Value: "1024"}}}
		}, "spec.securityContext.sysctls"},
		{"tty", func(in *Input) { in.Container.TTY = true }, "tty"},
	} {
		in := baseInput(t)
		tt.modify(&in)
		buildErr(t, in, tt.field, "")
	}
}

func TestRoot(t *testing.T) {
	t.Parallel()
	in := baseInput(t)
	s := mustBuild(t, in)
	if s.Root.Path != in.Rootfs || s.Root.Readonly {
		t.Errorf("root = %+v", s.Root)
	}
	in.Container.SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr(true)}
	if s := mustBuild(t, in); !s.Root.Readonly {
		t.Error("readOnlyRootFilesystem: root is writable")
	}
	in.Rootfs = "relative/rootfs"
	if _, err := Build(in); err == nil {
		t.Error("a relative rootfs was accepted")
	}
}

func TestRlimits(t *testing.T) {
	t.Parallel()
	in := baseInput(t)
	want := []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 1 << 20, Hard: 1 << 20}, {Type: "RLIMIT_CORE"}}
	if got := mustBuild(t, in).Process.Rlimits; !slices.Equal(got, want) {
		t.Errorf("rlimits = %+v, want %+v", got, want)
	}
	in.Policy.OpenFiles = 4096
	want[0].Soft, want[0].Hard = 4096, 4096
	if got := mustBuild(t, in).Process.Rlimits; !slices.Equal(got, want) {
		t.Errorf("rlimits = %+v, want %+v", got, want)
	}
	if n := MaxOpenFiles(); n < 1024 {
		t.Errorf("MaxOpenFiles() = %d", n)
	}
}

func TestNamespaces(t *testing.T) {
	t.Parallel()
	in := baseInput(t)
	in.NetNSPath = "/run/knbox/netns/hello-00001-1"
	in.CgroupsPath = "/knbox/default/hello-00001-1"
	s := mustBuild(t, in)
	want := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
		{Type: specs.MountNamespace}, {Type: specs.CgroupNamespace},
		{Type: specs.NetworkNamespace, Path: in.NetNSPath},
	}
	if !slices.Equal(s.Linux.Namespaces, want) {
		t.Errorf("namespaces = %+v, want %+v", s.Linux.Namespaces, want)
	}
	if s.Linux.CgroupsPath != in.CgroupsPath || s.Hostname != "hello-00001-1" {
		t.Errorf("cgroupsPath %q, hostname %q", s.Linux.CgroupsPath, s.Hostname)
	}
	in.NetNSPath, in.Hostname = "", ""
	s = mustBuild(t, in)
	if ns := s.Linux.Namespaces[5]; ns.Type != specs.NetworkNamespace || ns.Path != "" {
		t.Errorf("network namespace without a path = %+v", ns)
	}
	if s.Hostname != "localhost" {
		t.Errorf("default hostname = %q", s.Hostname)
	}
	for _, p := range []string{"/proc/1/ns/net", "/proc/self/ns/net", "/proc/../proc/1/ns/net", "relative/ns"} {
		in.NetNSPath = p
		if _, err := Build(in); err == nil {
			t.Errorf("network namespace %s was accepted", p)
		}
	}
}

func TestMaskedAndReadonlyPaths(t *testing.T) {
	t.Parallel()
	in := baseInput(t)
	s := mustBuild(t, in)
	for _, p := range []string{"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"} {
		if !slices.Contains(s.Linux.MaskedPaths, p) {
			t.Errorf("%s is not masked", p)
		}
	}
	for _, p := range []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"} {
		if !slices.Contains(s.Linux.ReadonlyPaths, p) {
			t.Errorf("%s is not read-only", p)
		}
	}
	// The returned slices are copies: changing them changes no default.
	s.Linux.MaskedPaths[0] = "changed"
	if mustBuild(t, in).Linux.MaskedPaths[0] == "changed" {
		t.Error("Build returned the package's default slice")
	}

	in.Policy.MaskedPaths, in.Policy.ReadonlyPaths = []string{"/proc/x"}, []string{}
	s = mustBuild(t, in)
	if !slices.Equal(s.Linux.MaskedPaths, []string{"/proc/x"}) || len(s.Linux.ReadonlyPaths) != 0 {
		t.Errorf("operator's paths: masked %v, read-only %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
}

func TestSeccomp(t *testing.T) {
	t.Parallel()
	// allowed reports whether p lets name through for any arguments, only
	// for some (the rules' args), or not at all, and the errno it fails with.
	type verdict struct {
		allowed bool
		args    [][]specs.LinuxSeccompArg
		errno   uint
	}
	check := func(p *specs.LinuxSeccomp, name string) verdict {
		v := verdict{errno: *p.DefaultErrnoRet}
		for _, r := range p.Syscalls {
			if !slices.Contains(r.Names, name) {
				continue
			}
			switch {
			case r.Action == specs.ActAllow && len(r.Args) == 0:
				v.allowed = true
			case r.Action == specs.ActAllow:
				v.args = append(v.args, r.Args)
			case r.Action == specs.ActErrno:
				v.errno = *r.ErrnoRet
			}
		}
		return v
	}
	p := defaultSeccomp("amd64", DefaultCapabilities)
	if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != errnoEPERM {
		t.Errorf("default action %s (%v), want SCMP_ACT_ERRNO with EPERM: an allow list", p.DefaultAction, p.DefaultErrnoRet)
	}
	if !slices.Equal(p.Architectures, []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}) {
		t.Errorf("architectures %v", p.Architectures)
	}
	for _, name := range []string{"read", "write", "execve", "accept4", "epoll_wait", "futex", "mmap", "rt_sigaction", "arch_prctl", "getrandom", "prctl", "setuid", "pidfd_open"} {
		if v := check(p, name); !v.allowed {
			t.Errorf("%s: %+v, want allowed", name, v)
		}
	}
	for _, name := range []string{"keyctl", "add_key", "request_key", "mount", "umount2", "pivot_root", "swapon", "swapoff", "reboot", "kexec_load",
		"init_module", "finit_module", "delete_module", "bpf", "perf_event_open", "ptrace", "process_vm_readv", "setns", "unshare", "acct",
		"settimeofday", "clock_settime", "open_by_handle_at", "userfaultfd", "chroot", "syslog", "sysfs", "lookup_dcookie", "vhangup",
		"iopl", "ioperm", "sethostname", "fanotify_init", "quotactl", "kcmp", "pidfd_getfd", "mbind", "unknown_future_call"} {
		if v := check(p, name); v.allowed || v.args != nil || v.errno != errnoEPERM {
			t.Errorf("%s: %+v, want EPERM (not on the list)", name, v)
		}
	}
	for _, name := range []string{"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"} {
		if v := check(p, name); v.allowed || v.errno != errnoENOSYS {
			t.Errorf("%s: %+v, want ENOSYS", name, v)
		}
	}
	if v := check(p, "clone"); v.allowed || len(v.args) != 1 || v.args[0][0] != (specs.LinuxSeccompArg{Index: 0, Value: cloneNamespaceFlags, Op: specs.OpMaskedEqual}) {
		t.Errorf("clone: %+v, want allowed without namespace flags only", v)
	}
	if v := check(p, "socket"); v.allowed || len(v.args) != 1 || v.args[0][0] != (specs.LinuxSeccompArg{Index: 0, Value: afVsock, Op: specs.OpNotEqual}) {
		t.Errorf("socket: %+v, want allowed but for AF_VSOCK", v)
	}
	if v := check(p, "personality"); v.allowed || len(v.args) != len(personalities) {
		t.Errorf("personality: %+v, want allowed for %v only", v, personalities)
	}

	// Capabilities open what they govern.
	for c, names := range map[string][]string{
		"CAP_SYS_PTRACE": {"ptrace", "process_vm_readv", "kcmp"},
		"CAP_SYS_CHROOT": {"chroot"},
		"CAP_SYS_TIME":   {"settimeofday", "clock_settime"},
		"CAP_BPF":        {"bpf"},
	} {
		q := defaultSeccomp("amd64", []string{"CAP_NET_BIND_SERVICE", c})
		for _, name := range names {
			if v := check(q, name); !v.allowed {
				t.Errorf("with %s, %s: %+v, want allowed", c, name, v)
			}
		}
		if v := check(q, "mount"); v.allowed {
			t.Errorf("with %s, mount allowed", c)
		}
	}
	q := defaultSeccomp("amd64", []string{"CAP_SYS_ADMIN"})
	for _, name := range []string{"clone", "clone3", "unshare", "setns", "mount"} {
		if v := check(q, name); !v.allowed {
			t.Errorf("with CAP_SYS_ADMIN, %s: %+v, want allowed", name, v)
		}
	}
	for _, name := range []string{"io_uring_setup", "keyctl", "userfaultfd"} {
		if v := check(q, name); v.allowed {
			t.Errorf("with CAP_SYS_ADMIN, %s allowed", name)
		}
	}

	// Other architectures: their own calls, clone's flags where they are.
	a := defaultSeccomp("arm64", nil)
	if v := check(a, "arch_prctl"); v.allowed {
		t.Error("arm64: arch_prctl allowed")
	}
	if v := check(a, "set_tls"); !v.allowed {
		t.Error("arm64: set_tls not allowed")
	}
	if v := check(defaultSeccomp("s390x", nil), "clone"); len(v.args) != 1 || v.args[0][0].Index != 1 {
		t.Errorf("s390x clone: %+v, want flags at argument 1", v)
	}

	// Build uses the container's bounding set, and the operator's profile
	// as it is.
	in := baseInput(t)
	in.Container.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_CHROOT"}}}
	if v := check(mustBuild(t, in).Linux.Seccomp, "chroot"); !v.allowed {
		t.Errorf("chroot with SYS_CHROOT added: %+v", v)
	}
	own := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno}
	in.Policy.Seccomp = own
	if got := mustBuild(t, in).Linux.Seccomp; got != own {
		t.Errorf("the operator's profile was not used: %+v", got)
	}
	in.Policy.Unconfined = true
	if got := mustBuild(t, in).Linux.Seccomp; got != nil {
		t.Errorf("unconfined: %+v, want no profile", got)
	}
}

func TestResources(t *testing.T) {
	t.Parallel()
	q := resource.MustParse
	tests := []struct {
		name             string
		limits, requests corev1.ResourceList
		pids             int64
		wantMem          int64 // 0: no memory limit
		wantShares       uint64
		wantQuota        int64 // 0: no quota
		wantPids         int64 // 0: no pids limit
		errField         string
	}{
		{name: "nothing", wantShares: 2, wantPids: 4096},
		{name: "memory", limits: corev1.ResourceList{corev1.ResourceMemory: q("128Mi")}, wantMem: 128 << 20, wantShares: 2, wantPids: 4096},
		{name: "cpu limit and request", limits: corev1.ResourceList{corev1.ResourceCPU: q("1500m")}, requests: corev1.ResourceList{corev1.ResourceCPU: q("250m")}, wantShares: 256, wantQuota: 150000, wantPids: 4096},
		{name: "cpu limit alone sets the request", limits: corev1.ResourceList{corev1.ResourceCPU: q("2")}, wantShares: 2048, wantQuota: 200000, wantPids: 4096},
		{name: "tiny cpu", limits: corev1.ResourceList{corev1.ResourceCPU: q("1m")}, wantShares: 2, wantQuota: 1000, wantPids: 4096},
		{name: "huge request", requests: corev1.ResourceList{corev1.ResourceCPU: q("1000")}, wantShares: 262144, wantPids: 4096},
		{name: "pids from policy", pids: 100, wantShares: 2, wantPids: 100},
		{name: "pids unlimited", pids: -1, wantShares: 2},
		{name: "zero memory", limits: corev1.ResourceList{corev1.ResourceMemory: q("0")}, errField: "resources.limits.memory"},
		{name: "negative cpu", requests: corev1.ResourceList{corev1.ResourceCPU: q("-1")}, errField: "resources.requests.cpu"},
		{name: "absurd cpu", limits: corev1.ResourceList{corev1.ResourceCPU: q("10M")}, errField: "resources.limits.cpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := baseInput(t)
			in.Container.Resources = corev1.ResourceRequirements{Limits: tt.limits, Requests: tt.requests}
			in.Policy.PidsLimit = tt.pids
			if tt.errField != "" {
				buildErr(t, in, tt.errField, "")
				return
			}
			r := mustBuild(t, in).Linux.Resources
			if len(r.Devices) != 1 || r.Devices[0].Allow || r.Devices[0].Access != "rwm" {
				t.Errorf("devices = %+v, want deny all", r.Devices)
			}
			switch {
			case tt.wantMem == 0 && r.Memory != nil:
				t.Errorf("memory = %+v, want none", r.Memory)
			case tt.wantMem != 0 && (r.Memory == nil || *r.Memory.Limit != tt.wantMem || *r.Memory.Swap != tt.wantMem):
				t.Errorf("memory = %+v, want limit and swap %d", r.Memory, tt.wantMem)
			}
			if *r.CPU.Shares != tt.wantShares {
				t.Errorf("shares = %d, want %d", *r.CPU.Shares, tt.wantShares)
			}
			switch {
			case tt.wantQuota == 0 && (r.CPU.Quota != nil || r.CPU.Period != nil):
				t.Errorf("quota %v, period %v: want none", r.CPU.Quota, r.CPU.Period)
			case tt.wantQuota != 0 && (r.CPU.Quota == nil || *r.CPU.Quota != tt.wantQuota || *r.CPU.Period != 100000):
				t.Errorf("quota %v, period %v: want %d per 100000", r.CPU.Quota, r.CPU.Period, tt.wantQuota)
			}
			switch {
			case tt.wantPids == 0 && r.Pids != nil:
				t.Errorf("pids = %d, want none", *r.Pids.Limit)
			case tt.wantPids != 0 && (r.Pids == nil || *r.Pids.Limit != tt.wantPids):
				t.Errorf("pids = %+v, want %d", r.Pids, tt.wantPids)
			}
		})
	}
}

func TestOOMScoreAdj(t *testing.T) {
	t.Parallel()
	q := resource.MustParse
	for _, tt := range []struct {
		name             string
		limits, requests corev1.ResourceList
		machine          int64
		want             int
	}{
		{name: "best effort", want: 1000},
		{name: "request of a quarter", requests: corev1.ResourceList{corev1.ResourceMemory: q("2Gi")}, machine: 8 << 30, want: 750},
		{name: "limit only is the request", limits: corev1.ResourceList{corev1.ResourceMemory: q("4Gi")}, machine: 8 << 30, want: 500},
		{name: "never below 2", requests: corev1.ResourceList{corev1.ResourceMemory: q("16Gi")}, machine: 8 << 30, want: 2},
		{name: "never above 999", requests: corev1.ResourceList{corev1.ResourceMemory: q("1")}, machine: 8 << 30, want: 999},
		{name: "unknown machine", requests: corev1.ResourceList{corev1.ResourceMemory: q("1Gi")}, want: 999},
		{name: "cpu only is best effort", requests: corev1.ResourceList{corev1.ResourceCPU: q("1")}, machine: 8 << 30, want: 1000},
	} {
		in := baseInput(t)
		in.Container.Resources = corev1.ResourceRequirements{Limits: tt.limits, Requests: tt.requests}
		in.MachineMemory = tt.machine
		if got := *mustBuild(t, in).Process.OOMScoreAdj; got != tt.want {
			t.Errorf("%s: oomScoreAdj = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func mountAt(s *specs.Spec, dst string) *specs.Mount {
	for i := range s.Mounts {
		if s.Mounts[i].Destination == dst {
			return &s.Mounts[i]
		}
	}
	return nil
}

func TestFixedMounts(t *testing.T) {
	t.Parallel()
	in := baseInput(t)
	in.EtcHosts, in.EtcHostname, in.ResolvConf = "/host/hosts", "/host/hostname", "/host/resolv.conf"
	in.TerminationLog, in.SyslogSocket = "/host/termination-log", "/host/log.sock"
	s := mustBuild(t, in)
	for _, tt := range []struct {
		dst, typ, src string
		opts          []string
	}{
		{"/proc", "proc", "proc", nil},
		{"/dev", "tmpfs", "tmpfs", []string{"nosuid", "strictatime", "mode=755"}},
		{"/dev/pts", "devpts", "devpts", []string{"newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{"/dev/shm", "tmpfs", "shm", []string{"size=67108864", "mode=1777"}},
		{"/dev/mqueue", "mqueue", "mqueue", nil},
		{"/sys", "sysfs", "sysfs", []string{"ro", "nosuid", "noexec", "nodev"}},
		{"/sys/fs/cgroup", "cgroup", "cgroup", []string{"ro"}},
		{"/tmp", "tmpfs", "tmpfs", []string{"mode=1777", "nosuid", "nodev"}},
		{"/var/log", "tmpfs", "tmpfs", []string{"mode=1777"}},
		{"/etc/hosts", "bind", "/host/hosts", []string{"bind", "ro"}},
		{"/etc/hostname", "bind", "/host/hostname", []string{"bind", "ro"}},
		{"/etc/resolv.conf", "bind", "/host/resolv.conf", []string{"bind", "ro"}},
		{"/dev/termination-log", "bind", "/host/termination-log", []string{"bind", "rw"}},
		{"/dev/log", "bind", "/host/log.sock", []string{"bind", "rw"}},
	} {
		m := mountAt(s, tt.dst)
		if m == nil {
			t.Errorf("no mount at %s", tt.dst)
			continue
		}
		if m.Type != tt.typ || m.Source != tt.src {
			t.Errorf("%s: type %s source %s, want %s %s", tt.dst, m.Type, m.Source, tt.typ, tt.src)
		}
		for _, o := range tt.opts {
			if !slices.Contains(m.Options, o) {
				t.Errorf("%s: options %v lack %s", tt.dst, m.Options, o)
			}
		}
	}
	// Nothing given, nothing mounted: the image's files stay.
	s = mustBuild(t, baseInput(t))
	for _, dst := range []string{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/dev/termination-log", "/dev/log"} {
		if mountAt(s, dst) != nil {
			t.Errorf("%s is mounted without a source", dst)
		}
	}
}

func TestVarLogAndTmpfsSize(t *testing.T) {
	t.Parallel()
	in := baseInput(t)
	in.VarLog = "/host/logs"
	in.Container.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}
	s := mustBuild(t, in)
	if m := mountAt(s, "/var/log"); m == nil || m.Type != "bind" || m.Source != "/host/logs" || !slices.Contains(m.Options, "rw") {
		t.Errorf("/var/log = %+v, want a read-write bind of /host/logs", m)
	}
	if m := mountAt(s, "/tmp"); m == nil || !slices.Contains(m.Options, "size=268435456") {
		t.Errorf("/tmp = %+v, want sized to the memory limit", m)
	}
}

func TestTerminationMessagePath(t *testing.T) {
	t.Parallel()
	in := baseInput(t)
	in.TerminationLog = "/host/term"
	in.Container.TerminationMessagePath = "/var/run/app/term.log"
	s := mustBuild(t, in)
	if m := mountAt(s, "/var/run/app/term.log"); m == nil || m.Source != "/host/term" {
		t.Errorf("custom terminationMessagePath: mount %+v", m)
	}
	if mountAt(s, "/dev/termination-log") != nil {
		t.Error("/dev/termination-log is mounted too")
	}
	for _, p := range []string{"relative", "/proc/x", "/tmp", "/dev/log"} {
		in.Container.TerminationMessagePath = p
		buildErr(t, in, "terminationMessagePath", "")
	}
}

func TestVolumes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	scratch := filepath.Join(dir, "scratch")
	for _, d := range []string{secret, scratch, filepath.Join(secret, "..data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(secret, "..data", "token"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// As the kubelet's atomic writer lays a secret out: key -> ..data/key.
	if err := os.Symlink("..data/token", filepath.Join(secret, "token")); err != nil {
		t.Fatal(err)
	}
	// A link that tries to leave the volume.
	if err := os.Symlink("/etc/shadow", filepath.Join(secret, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../../../../../etc", filepath.Join(secret, "up")); err != nil {
		t.Fatal(err)
	}
	vols := map[string]Volume{"secret": {Path: secret}, "scratch": {Path: scratch, Writable: true}}

	in := baseInput(t)
	in.Volumes = vols
	in.EtcHosts = "/host/hosts"
	in.Container.VolumeMounts = []corev1.VolumeMount{
		{Name: "secret", MountPath: "/etc/secret/", ReadOnly: true},
		{Name: "secret", MountPath: "/etc/token", SubPath: "token", ReadOnly: true},
		{Name: "scratch", MountPath: "/scratch"},                    // emptyDir: writable
		{Name: "scratch", MountPath: "/scratch-ro", ReadOnly: true}, // unless readOnly
		{Name: "secret", MountPath: "/tmp"},                         // replaces the /tmp tmpfs; a secret is never writable
		{Name: "scratch", MountPath: "/etc"},                        // a parent of /etc/hosts
	}
	s := mustBuild(t, in)
	realSecret, _ := filepath.EvalSymlinks(secret)
	for _, tt := range []struct{ dst, src, mode string }{
		{"/etc/secret", secret, "ro"},
		{"/etc/token", filepath.Join(realSecret, "..data", "token"), "ro"},
		{"/scratch", scratch, "rw"},
		{"/scratch-ro", scratch, "ro"},
		{"/tmp", secret, "ro"},
		{"/etc", scratch, "rw"},
	} {
		m := mountAt(s, tt.dst)
		if m == nil || m.Type != "bind" || m.Source != tt.src || !slices.Contains(m.Options, tt.mode) || !slices.Contains(m.Options, "rbind") {
			t.Errorf("%s: mount %+v, want an rbind of %s, %s", tt.dst, m, tt.src, tt.mode)
		}
	}
	n := 0
	for _, m := range s.Mounts {
		if m.Destination == "/tmp" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d mounts at /tmp, want the volume only", n)
	}
	// Parents before children.
	pos := map[string]int{}
	for i, m := range s.Mounts {
		pos[m.Destination] = i
	}
	for _, pair := range [][2]string{{"/etc", "/etc/hosts"}, {"/etc", "/etc/secret"}, {"/dev", "/dev/pts"}, {"/sys", "/sys/fs/cgroup"}} {
		if pos[pair[0]] > pos[pair[1]] {
			t.Errorf("%s is mounted after %s", pair[0], pair[1])
		}
	}

	// A symlink in a volume stays in it: "escape" -> /etc/shadow resolves
	// to <volume>/etc/shadow, which does not exist.
	for _, sub := range []string{"escape", "up/shadow"} {
		in.Container.VolumeMounts = []corev1.VolumeMount{{Name: "secret", MountPath: "/x", SubPath: sub, ReadOnly: true}}
		if s, err := Build(in); err == nil {
			t.Errorf("subPath %s: mounted %s", sub, mountAt(s, "/x").Source)
		}
	}

	for _, tt := range []struct {
		vm       corev1.VolumeMount
		errField string
		errMsg   string
	}{
		{corev1.VolumeMount{Name: "nope", MountPath: "/x"}, "volumeMounts[0].name", "not prepared"},
		{corev1.VolumeMount{Name: "secret", MountPath: "x"}, "volumeMounts[0].mountPath", "absolute"},
		{corev1.VolumeMount{Name: "secret", MountPath: "/a:b"}, "volumeMounts[0].mountPath", "':'"},
		{corev1.VolumeMount{Name: "secret", MountPath: "/"}, "volumeMounts[0].mountPath", "reserved"},
		{corev1.VolumeMount{Name: "secret", MountPath: "/dev"}, "volumeMounts[0].mountPath", "reserved"},
		{corev1.VolumeMount{Name: "secret", MountPath: "/dev/log"}, "volumeMounts[0].mountPath", "reserved"},
		{corev1.VolumeMount{Name: "secret", MountPath: "/proc/sys/x"}, "volumeMounts[0].mountPath", "reserved"},
		{corev1.VolumeMount{Name: "secret", MountPath: "/sys/fs/cgroup"}, "volumeMounts[0].mountPath", "reserved"},
		{corev1.VolumeMount{Name: "secret", MountPath: "/x", SubPath: "../etc"}, "volumeMounts[0].subPath", "without '..'"},
		{corev1.VolumeMount{Name: "secret", MountPath: "/x", SubPath: "a/../../b"}, "volumeMounts[0].subPath", "without '..'"},
		{corev1.VolumeMount{Name: "secret", MountPath: "/x", SubPath: "/etc"}, "volumeMounts[0].subPath", "relative"},
		{corev1.VolumeMount{Name: "secret", MountPath: "/x", SubPath: "missing"}, "volumeMounts[0].subPath", "missing"},
		{corev1.VolumeMount{Name: "secret", MountPath: "/x", SubPathExpr: "$(POD)"}, "volumeMounts[0].subPathExpr", "not supported"},
	} {
		in := baseInput(t)
		in.Volumes = vols
		in.Container.VolumeMounts = []corev1.VolumeMount{tt.vm}
		buildErr(t, in, tt.errField, tt.errMsg)
	}
	in = baseInput(t)
	in.Volumes = vols
	in.Container.VolumeMounts = []corev1.VolumeMount{{Name: "secret", MountPath: "/x"}, {Name: "scratch", MountPath: "/x/"}}
	buildErr(t, in, "volumeMounts[1].mountPath", "twice")
	in.TerminationLog = "/host/term"
	in.Container.VolumeMounts = []corev1.VolumeMount{{Name: "secret", MountPath: "/dev/termination-log"}}
	buildErr(t, in, "volumeMounts[0].mountPath", "terminationMessagePath")
}

// TestPinHook: every host path Build puts into the spec goes through
// Input.Pin, and the spec names what Pin returned; symbolic links may be
// followed for subPaths only; a failed pin of a subPath is the Revision's
// fault (a FieldError), of knbox's own files not.
func TestPinHook(t *testing.T) {
	t.Parallel()
	in := baseInput(t)
	in.EtcHosts, in.EtcHostname, in.ResolvConf = "/inst/hosts", "/inst/hostname", "/inst/resolv.conf"
	in.TerminationLog, in.SyslogSocket = "/inst/ctr/termination-log", "/inst/log.sock"
	in.Volumes = map[string]Volume{"v": {Path: "/inst/volumes/0", Writable: true}, "w": {Path: "/inst/volumes/1"}}
	in.Container.VolumeMounts = []corev1.VolumeMount{
		{Name: "v", MountPath: "/data"},
		{Name: "v", MountPath: "/sub", SubPath: "a/b"},
		{Name: "w", MountPath: "/etc/resolv.conf", SubPath: "resolv"}, // replaces the fixed one: not pinned
	}
	var got []HostPath
	in.Pin = func(hp HostPath) (string, error) {
		got = append(got, hp)
		return "/pinned/" + strings.ReplaceAll(strings.TrimPrefix(path.Join(hp.Root, hp.Rel), "/"), "/", "_"), nil
	}
	s := mustBuild(t, in)
	want := []HostPath{
		{Root: "/inst/ctr", Rel: "termination-log"},
		{Root: "/inst/volumes/0"},
		{Root: "/inst/volumes/0", Rel: "a/b", FollowSymlinks: true, MakeDirs: true},
		{Root: "/inst/volumes/1", Rel: "resolv", FollowSymlinks: true},
		{Root: "/inst", Rel: "hosts"},
		{Root: "/inst", Rel: "hostname"},
		{Root: "/inst", Rel: "log.sock"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("pinned\n %+v\nwant\n %+v", got, want)
	}
	for dst, src := range map[string]string{
		"/etc/hosts": "/pinned/inst_hosts", "/dev/log": "/pinned/inst_log.sock", "/dev/termination-log": "/pinned/inst_ctr_termination-log",
		"/data": "/pinned/inst_volumes_0", "/sub": "/pinned/inst_volumes_0_a_b", "/etc/resolv.conf": "/pinned/inst_volumes_1_resolv",
	} {
		if m := mountAt(s, dst); m == nil || m.Source != src {
			t.Errorf("%s: %+v, want source %s", dst, m, src)
		}
	}
	for _, m := range s.Mounts {
		if m.Type == "bind" && !strings.HasPrefix(m.Source, "/pinned/") {
			t.Errorf("%s: source %s was not pinned", m.Destination, m.Source)
		}
	}

	in.Pin = func(hp HostPath) (string, error) {
		if hp.Rel == "a/b" {
			return "", errors.New("leads out of the volume")
		}
		return "/pinned", nil
	}
	buildErr(t, in, "volumeMounts[1].subPath", "leads out of the volume")
	in.Pin = func(hp HostPath) (string, error) {
		if hp.Rel == "hosts" {
			return "", errors.New("passes a symbolic link")
		}
		return "/pinned", nil
	}
	_, err := Build(in)
	var fe *FieldError
	if err == nil || errors.As(err, &fe) || !strings.Contains(err.Error(), "/etc/hosts: passes a symbolic link") {
		t.Errorf("a failed pin of /etc/hosts: %v, want an error that is not the Revision's", err)
	}
}
