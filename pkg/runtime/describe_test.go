package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestDescribeRoundTrip: a handler made again from its Description (in a
// pod's shim) is the handler described: the same configuration, what NewOCI
// learnt of the binary, and the binary is not asked again.
//
// Not parallel: it writes and runs a fake runtime binary, and a child that
// a parallel test forks meanwhile may still hold it open for writing, which
// fails the exec with ETXTBSY (see busyboxCopy). It failed so in CI once.
func TestDescribeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		help string // what the binary's `run --help` prints
		keep bool
	}{
		{"keep", "   --keep   do not delete the container after it exits\n", true},
		{"no keep", "   --detach\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			calls := filepath.Join(dir, "calls")
			// A stand-in for the runtime's CLI that counts its calls:
			// what is tested is the probe, not a runtime.
			bin := filepath.Join(dir, "fakert")
			script := "#!/bin/sh\necho \"$@\" >> " + calls + "\nprintf '%s' '" + tc.help + "'\n"
			if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := OCIConfig{Name: "fake", Binary: bin, Root: filepath.Join(dir, "root"), Args: []string{"--debug"},
				SandboxENOSYS: true}
			h, err := NewOCI(cfg)
			if err != nil {
				t.Fatal(err)
			}
			d := h.(Describer).Describe()
			b, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			var back Description
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			h2, err := FromDescription(back)
			if err != nil {
				t.Fatal(err)
			}
			o1, o2 := h.(*ociHandler), h2.(*ociHandler)
			if o1.keep != tc.keep {
				t.Errorf("keep %v, want %v", o1.keep, tc.keep)
			}
			if !reflect.DeepEqual(o1, o2) {
				t.Errorf("made again from its description:\n%+v\nwant\n%+v", o2, o1)
			}
			got, err := os.ReadFile(calls)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(got), "\n"); n != 1 {
				t.Errorf("the binary was run %d times, want once (NewOCI's probe only):\n%s", n, got)
			}
		})
	}
}
