package config

import (
	"strings"
	"testing"
)

func TestRuntimesTable(t *testing.T) {
	c, err := parse([]byte(`
dataDir: /srv/knbox
runtimes:
  kata:
    binary: /opt/kata/bin/kata-runtime
  runsc:
    binary: /usr/local/bin/runsc
    args: ["--platform=ptrace", "--network=host"]
defaultRuntimeClass: runsc
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Runtimes["kata"]; got.Type != RuntimeOCI || c.RuntimeRoot("kata") != "/srv/knbox/runtimes/kata" {
		t.Errorf("kata: %+v", got)
	}
	if got := c.Runtimes["runsc"]; got.Binary != "/usr/local/bin/runsc" || len(got.Args) != 2 {
		t.Errorf("runsc override: %+v", got)
	}
	for _, name := range []string{"runc", "crun", "process"} {
		if _, ok := c.Runtimes[name]; !ok {
			t.Errorf("built-in %s missing", name)
		}
	}
	if c.DefaultRuntimeClass != "runsc" {
		t.Errorf("default class %q", c.DefaultRuntimeClass)
	}
	d := Default()
	d.DataDir = "/elsewhere" // as --data-dir does after loading
	if got := d.RuntimeRoot("runc"); got != "/elsewhere/runtimes/runc" {
		t.Errorf("runc root follows the data dir: %s", got)
	}
	if d.DefaultRuntimeClass != "runc" || d.Runtimes["runsc"].Args[0] != "--network=host" {
		t.Errorf("defaults: %q %+v", d.DefaultRuntimeClass, d.Runtimes["runsc"])
	}
	if !d.Runtimes["runsc"].ManagesCgroups() || d.Runtimes["runc"].ManagesCgroups() {
		t.Errorf("manageCgroups by default: runsc %v, runc %v; want runsc only", d.Runtimes["runsc"].ManagesCgroups(), d.Runtimes["runc"].ManagesCgroups())
	}
	// An entry that overrides other fields keeps the built-in's; one that
	// sets it wins.
	if !c.Runtimes["runsc"].ManagesCgroups() {
		t.Errorf("runsc override lost manageCgroups: %+v", c.Runtimes["runsc"])
	}
	off, err := parse([]byte("runtimes:\n  runsc:\n    manageCgroups: false\n  kata:\n    binary: kata\n    manageCgroups: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if off.Runtimes["runsc"].ManagesCgroups() || !off.Runtimes["kata"].ManagesCgroups() || off.Runtimes["runsc"].Binary != "runsc" {
		t.Errorf("manageCgroups set in the file: runsc %+v, kata %+v", off.Runtimes["runsc"], off.Runtimes["kata"])
	}
	// process isolates nothing: in the table, but off unless turned on.
	if d.Runtimes["process"].IsEnabled() || !d.Runtimes["runc"].IsEnabled() || !d.Runtimes["runsc"].LetsSandboxAnswerENOSYS() || d.Runtimes["runc"].LetsSandboxAnswerENOSYS() {
		t.Errorf("defaults: process enabled %v, runc enabled %v, runsc sandboxENOSYS %v", d.Runtimes["process"].IsEnabled(), d.Runtimes["runc"].IsEnabled(), d.Runtimes["runsc"].LetsSandboxAnswerENOSYS())
	}
	on, err := parse([]byte("runtimes:\n  process:\n    enabled: true\n  crun:\n    enabled: false\n  trusted:\n    type: process\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !on.Runtimes["process"].IsEnabled() || on.Runtimes["crun"].IsEnabled() || on.Runtimes["trusted"].IsEnabled() {
		t.Errorf("enabled set in the file: process %v, crun %v, trusted (type process) %v", on.Runtimes["process"].IsEnabled(), on.Runtimes["crun"].IsEnabled(), on.Runtimes["trusted"].IsEnabled())
	}
	for _, bad := range []struct{ doc, want string }{
		{"defaultRuntimeClass: process\n", `"process" is a runtime that is not enabled`},
		{"runtimes:\n  process:\n    sandboxENOSYS: true\n", "sandboxENOSYS"},
		{"runtimes:\n  Bad_Name:\n    binary: x\n", "not a valid handler name"},
		{"runtimes:\n  x:\n    type: vm\n    binary: x\n", "is not oci or process"},
		{"runtimes:\n  x:\n    type: oci\n", "binary: required"},
		{"runtimes:\n  x:\n    type: process\n    binary: y\n", "takes no binary"},
		{"runtimes:\n  process:\n    manageCgroups: true\n", "manageCgroups"},
		{"runtimes:\n  x:\n    binray: y\n", "binray"},
		{"runtimes:\n  runc: {}\n", ""},
	} {
		_, err := parse([]byte(bad.doc))
		if bad.want == "" {
			if err != nil {
				t.Errorf("%q: %v", bad.doc, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.doc, err, bad.want)
		}
	}
}

func TestInsecureRegistries(t *testing.T) {
	c, err := parse([]byte("insecureRegistries: [registry.lan:5000, mirror.internal]\n"))
	if err != nil || len(c.InsecureRegistries) != 2 {
		t.Fatalf("%v %v", c, err)
	}
	for _, bad := range []string{"insecureRegistries: [\"http://x\"]\n", "insecureRegistries: [\"a b\"]\n"} {
		if _, err := parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "insecureRegistries[0]") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
