package oci

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func FuzzExpand(f *testing.F) {
	for _, s := range []string{"", "$(A)", "$$(A)", "$(A", "$", "x$(B)y$$", "$()", "$(A)$(UNKNOWN)"} {
		f.Add(s)
	}
	m := map[string]string{"A": "a", "B": "$(A)"}
	f.Fuzz(func(t *testing.T, s string) {
		got := expand(s, m)
		if !strings.Contains(s, "$") && got != s {
			t.Fatalf("expand(%q) = %q: changed a string without references", s, got)
		}
		if strings.Count(got, "$") > strings.Count(s, "$")+strings.Count(s, "(") {
			t.Fatalf("expand(%q) = %q: made up references", s, got)
		}
		if empty := expand(s, nil); !strings.Contains(s, "$$") && empty != s {
			t.Fatalf("expand(%q, nil) = %q: with nothing to expand and no escapes, nothing changes", s, empty)
		}
	})
}

func FuzzParsePasswd(f *testing.F) {
	f.Add("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:\n")
	f.Add("# comment\n\nbad\nx:x:notanumber:0\ny:x:1:2\r\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, e := range parsePasswd(s) {
			if e.name == "" || strings.ContainsAny(e.name, ":\n") {
				t.Fatalf("entry %+v from %q", e, s)
			}
		}
	})
}

func FuzzParseGroup(f *testing.F) {
	f.Add("root:x:0:\nextra:x:2000:app, nonroot\n")
	f.Add(":x:1:\nx::\ng:x:4294967295:a\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, e := range parseGroup(s) {
			if e.name == "" || e.gid > maxID {
				t.Fatalf("entry %+v from %q", e, s)
			}
			for _, m := range e.members {
				if m == "" || strings.ContainsAny(m, ",\n") {
					t.Fatalf("member %q of %+v from %q", m, e, s)
				}
			}
		}
	})
}

// FuzzBuild feeds Build what a developer controls: it must return a spec or
// a FieldError, never panic, and never let the input change the hardening.
func FuzzBuild(f *testing.F) {
	f.Add("/bin/app", "$(PORT)", "A=b", "app:app", "/srv", "/data", "key", "NET_BIND_SERVICE")
	f.Add("", "", "=", ":", "rel", "/proc/x", "../x", "ALL")
	root := testRootfs(f)
	f.Fuzz(func(t *testing.T, command, arg, env, user, workingDir, mountPath, subPath, capability string) {
		in := Input{
			Container: corev1.Container{
				Command:      []string{command},
				Args:         []string{arg},
				WorkingDir:   workingDir,
				VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: mountPath, SubPath: subPath, ReadOnly: true}},
				SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
					Add: []corev1.Capability{corev1.Capability(capability)},
				}},
			},
			Image:   ImageConfig{User: user, Entrypoint: []string{"/x"}},
			Env:     []string{"PORT=8080", env},
			Rootfs:  root,
			Volumes: map[string]Volume{"v": {Path: root}},
		}
		s, err := Build(in)
		if err != nil {
			return
		}
		if !s.Process.NoNewPrivileges || s.Linux.Seccomp == nil || s.Process.Terminal {
			t.Fatal("hardening lost")
		}
		for _, c := range s.Process.Capabilities.Bounding {
			if !strings.HasPrefix(c, "CAP_") || !slices.Contains(DefaultCapabilities, c) && !slices.Contains(DefaultAddableCapabilities, c) {
				t.Fatalf("capability %s beyond the default and addable sets", c)
			}
		}
		for _, m := range s.Mounts {
			if m.Type == "bind" && m.Source != "" && strings.HasPrefix(m.Destination, "/proc") {
				t.Fatalf("bind mount into /proc: %+v", m)
			}
			if m.Source != "" && m.Type == "bind" && m.Destination == "/data" && !slices.Contains(m.Options, "ro") {
				t.Fatalf("a read-only volume mounted %v", m.Options)
			}
		}
	})
}
