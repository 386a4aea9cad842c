package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestLetSandboxAnswerENOSYS: ENOSYS rules become allow rules, nothing
// else in config.json changes (fields this package does not know survive),
// and a spec without seccomp is left alone.
func TestLetSandboxAnswerENOSYS(t *testing.T) {
	dir := t.TempDir()
	const in = `{"ociVersion":"1.0.2","x-unknown":{"kept":true},"linux":{"namespaces":[{"type":"pid"}],"seccomp":{
		"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,"syscalls":[
		{"names":["read"],"action":"SCMP_ACT_ALLOW"},
		{"names":["clone3","io_uring_setup"],"action":"SCMP_ACT_ERRNO","errnoRet":38},
		{"names":["keyctl"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}}}`
	file := filepath.Join(dir, "config.json")
	if err := os.WriteFile(file, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := letSandboxAnswerENOSYS(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Unknown map[string]bool `json:"x-unknown"`
		Linux   struct {
			Namespaces []map[string]string `json:"namespaces"`
			Seccomp    struct {
				DefaultAction string `json:"defaultAction"`
				Syscalls      []struct {
					Names    []string `json:"names"`
					Action   string   `json:"action"`
					ErrnoRet *uint    `json:"errnoRet"`
				} `json:"syscalls"`
			} `json:"seccomp"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	sc := got.Linux.Seccomp
	if !got.Unknown["kept"] || len(got.Linux.Namespaces) != 1 || sc.DefaultAction != "SCMP_ACT_ERRNO" || len(sc.Syscalls) != 3 {
		t.Fatalf("config.json changed beyond the ENOSYS rules:\n%s", b)
	}
	if r := sc.Syscalls[1]; r.Action != "SCMP_ACT_ALLOW" || r.ErrnoRet != nil {
		t.Errorf("the ENOSYS rule: %+v, want allow", r)
	}
	if r := sc.Syscalls[2]; r.Action != "SCMP_ACT_ERRNO" || r.ErrnoRet == nil || *r.ErrnoRet != 1 {
		t.Errorf("the EPERM rule changed: %+v", r)
	}

	none := t.TempDir()
	const plain = `{"linux":{}}`
	if err := os.WriteFile(filepath.Join(none, "config.json"), []byte(plain), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := letSandboxAnswerENOSYS(none); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(none, "config.json")); string(b) != plain {
		t.Errorf("a spec without seccomp was rewritten: %s", b)
	}
}
