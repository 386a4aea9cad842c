package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestPolicy(t *testing.T) {
	t.Parallel()
	d := Default()
	if d.Policy.RefuseRoot || d.Policy.Unconfined() || d.Policy.Seccomp != nil || d.Policy.DefaultCapabilities != nil || d.Policy.AddableCapabilities != nil || d.Policy.MaskedPaths != nil {
		t.Errorf("default policy %+v: want every key unset (package oci's defaults)", d.Policy)
	}

	profile := filepath.Join(t.TempDir(), "seccomp.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],
		"syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"},{"names":["clone"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":2114060288,"op":"SCMP_CMP_MASKED_EQ"}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, `
policy:
  refuseRoot: true
  seccompProfile: `+profile+`
  maskedPaths: []
  readonlyPaths: [/proc/sys]
  pidsLimit: 512
  openFiles: 4096
  defaultCapabilities: [NET_BIND_SERVICE, CHOWN]
  addableCapabilities: []
`)
	p := c.Policy
	if !p.RefuseRoot || p.PidsLimit != 512 || p.OpenFiles != 4096 || p.MaskedPaths == nil || len(p.MaskedPaths) != 0 ||
		len(p.ReadonlyPaths) != 1 || len(p.DefaultCapabilities) != 2 || p.AddableCapabilities == nil || len(p.AddableCapabilities) != 0 {
		t.Errorf("policy %+v", p)
	}
	if p.Seccomp == nil || p.Seccomp.DefaultAction != specs.ActErrno || len(p.Seccomp.Syscalls) != 2 || p.Seccomp.Syscalls[1].Args[0].Op != specs.OpMaskedEqual {
		t.Errorf("seccomp profile %+v", p.Seccomp)
	}
	if u := mustParse(t, "policy:\n  seccompProfile: Unconfined\n").Policy; !u.Unconfined() || u.Seccomp != nil {
		t.Errorf("Unconfined: %+v", u)
	}
	if r := mustParse(t, "policy:\n  seccompProfile: RuntimeDefault\n").Policy; r.Unconfined() || r.Seccomp != nil {
		t.Errorf("RuntimeDefault: %+v", r)
	}

	for _, bad := range []struct{ doc, want string }{
		{"policy:\n  seccompProfile: relative.json\n", "policy.seccompProfile: \"relative.json\" is not RuntimeDefault, Unconfined or an absolute path"},
		{"policy:\n  seccompProfile: /nonexistent/knbox-profile.json\n", "policy.seccompProfile: open /nonexistent/knbox-profile.json"},
		{"policy:\n  seccompProfile: /dev/null\n", "is not a regular file"},
		{"policy:\n  maskedPaths: [proc/kcore]\n", "policy.maskedPaths[0]"},
		{"policy:\n  readonlyPaths: [/proc/../etc]\n", "policy.readonlyPaths[0]"},
		{"policy:\n  pidsLimit: -2\n", "policy.pidsLimit"},
		{"policy:\n  addableCapabilities: [ALL]\n", "policy.addableCapabilities[0]"},
		{"policy:\n  defaultCapabilities: [KILL, \"a b\"]\n", "policy.defaultCapabilities[1]"},
		{"policy:\n  refuseRooot: true\n", "refuseRooot"},
	} {
		if _, err := parse([]byte(bad.doc)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.doc, err, bad.want)
		}
	}
}

func TestParseSeccompProfile(t *testing.T) {
	t.Parallel()
	for _, bad := range []struct{ doc, want string }{
		{`{"defaultAction":"SCMP_ACT_ERRNO","archMap":[]}`, "unknown field \"archMap\""},
		{`{"defaultAction":"SCMP_ACT_NOPE"}`, "defaultAction"},
		{`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":[],"action":"SCMP_ACT_ERRNO"}]}`, "syscalls[0].names: empty"},
		{`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],"action":"NOPE"}]}`, "syscalls[0].action"},
		{`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],"action":"SCMP_ACT_ERRNO","args":[{"index":6,"value":1,"op":"SCMP_CMP_EQ"}]}]}`, "index: 6"},
		{`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":1,"op":"LIKE"}]}]}`, "args[0].op"},
		{`{"defaultAction":"SCMP_ACT_ALLOW"} {}`, "data after the object"},
		{`[]`, "not an OCI seccomp profile"},
	} {
		if _, err := ParseSeccompProfile([]byte(bad.doc)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.doc, err, bad.want)
		}
	}
}

// FuzzSeccompProfile: an operator's profile file is refused with an error
// or accepted as one a runtime reads: actions and operators known, argument
// indexes 0 to 5, every rule named; never a panic.
func FuzzSeccompProfile(f *testing.F) {
	f.Add(`{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,"syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"}]}`)
	f.Add(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["clone"],"action":"SCMP_ACT_ERRNO","errnoRet":38,"args":[{"index":0,"value":1,"valueTwo":1,"op":"SCMP_CMP_MASKED_EQ"}]}]}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, doc string) {
		s, err := ParseSeccompProfile([]byte(doc))
		if err != nil {
			return
		}
		for _, r := range s.Syscalls {
			if len(r.Names) == 0 {
				t.Fatal("a rule without names accepted")
			}
			for _, a := range r.Args {
				if a.Index > 5 {
					t.Fatalf("argument index %d accepted", a.Index)
				}
			}
		}
	})
}
