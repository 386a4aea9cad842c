package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// letSandboxAnswerENOSYS rewrites the seccomp profile in bundle's
// config.json for a runtime that answers EPERM to every SCMP_ACT_ERRNO rule
// whatever its errnoRet (runsc 20221219): a rule that answers ENOSYS (clone3,
// io_uring_setup) is there so that programs read "not implemented" and fall
// back (glibc's pthread_create from clone3 to clone); EPERM instead makes
// them fail. Such a rule becomes an allow rule, and the runtime's own kernel
// answers the call (gVisor: ENOSYS for clone3; its own io_uring, inside the
// sandbox). Only for runtimes with a kernel of their own: under runc the
// host's kernel would answer. Nothing else in the file changes.
func letSandboxAnswerENOSYS(bundle string) error {
	file := filepath.Join(bundle, "config.json")
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("read config.json: %w", err)
	}
	var linux map[string]json.RawMessage
	if l, ok := doc["linux"]; ok {
		if err := json.Unmarshal(l, &linux); err != nil {
			return fmt.Errorf("read config.json linux: %w", err)
		}
	}
	sc, ok := linux["seccomp"]
	if !ok {
		return nil
	}
	var profile map[string]json.RawMessage
	if err := json.Unmarshal(sc, &profile); err != nil || profile == nil {
		return nil // "null", or not a profile: the runtime says what it thinks of it
	}
	var rules []map[string]json.RawMessage
	if r, ok := profile["syscalls"]; ok {
		if err := json.Unmarshal(r, &rules); err != nil {
			return fmt.Errorf("read config.json seccomp syscalls: %w", err)
		}
	}
	changed := false
	for _, r := range rules {
		var action specs.LinuxSeccompAction
		var errno *uint
		_ = json.Unmarshal(r["action"], &action)
		_ = json.Unmarshal(r["errnoRet"], &errno)
		if action != specs.ActErrno || errno == nil || *errno != uint(unix.ENOSYS) {
			continue
		}
		r["action"], _ = json.Marshal(specs.ActAllow)
		delete(r, "errnoRet")
		changed = true
	}
	if !changed {
		return nil
	}
	if profile["syscalls"], err = json.Marshal(rules); err != nil {
		return err
	}
	if linux["seccomp"], err = json.Marshal(profile); err != nil {
		return err
	}
	if doc["linux"], err = json.Marshal(linux); err != nil {
		return err
	}
	b, err := json.MarshalIndent(doc, "", "\t")
	if err != nil {
		return err
	}
	return writeFileAtomic(file, b, 0o644)
}
