package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// policySeccomp is the operator's seccomp profile of TestOperatorPolicy:
// everything allowed but mkdir, so that its effect is visible and differs
// from RuntimeDefault's (which allows mkdir).
const policySeccomp = `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
  {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}`

// policyStartup is the policy Service's shell script: what it prints lands
// in the logs.
const policyStartup = `cat /proc/self/status
mkdir /tmp/made && echo mkdir=allowed || echo mkdir=refused
echo pids.max=$(cat /sys/fs/cgroup/pids/pids.max)
echo cpuinfo-bytes=$(cat /proc/cpuinfo | wc -c)
echo startup-done
exec /app`

// TestOperatorPolicy: the operator's policy section of the config file, end
// to end through kubectl: root refused with the field named, an added
// capability within what the operator allows (Knative's
// kubernetes.containerspec-addcapabilities on), one beyond it refused, the
// operator's seccomp profile, pids limit and masked paths in the container;
// and the process runtime, enabled, registered as isolating nothing.
func TestOperatorPolicy(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "seccomp.json")
	if err := os.WriteFile(profile, []byte(policySeccomp), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := ctConfigFile(t, `
configMaps:
  config-features:
    kubernetes.containerspec-addcapabilities: enabled
runtimes:
  process:
    enabled: true
policy:
  refuseRoot: true
  seccompProfile: `+profile+`
  pidsLimit: 321
  maskedPaths: [/proc/cpuinfo]
  addableCapabilities: [NET_RAW]
`)
	e := newContractEnv(t, "--config", cfg)
	uid := int64(65532)
	e.apply(t, contractService("root", "runc", corev1.Container{Image: e.infoRef}))
	e.apply(t, contractService("sysadmin", "runc", corev1.Container{
		Image: e.infoRef,
		SecurityContext: &corev1.SecurityContext{RunAsUser: &uid,
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}},
	}))
	e.apply(t, contractService("policy", "runc", corev1.Container{
		Image:   e.toolRef,
		Command: []string{"/bin/sh", "-c", policyStartup},
		SecurityContext: &corev1.SecurityContext{RunAsUser: &uid,
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}}},
	}))

	t.Run("process-runtimeclass", func(t *testing.T) {
		e.waitRuntimeClasses(t, "process")
		out := e.kubectl(t, "", "get", "runtimeclass", "process", "-o", "json")
		var rc struct {
			Metadata struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal([]byte(out), &rc); err != nil {
			t.Fatal(err)
		}
		if rc.Metadata.Labels["knbox.dev/isolation"] != "none" || !strings.Contains(rc.Metadata.Annotations["knbox.dev/description"], "does not isolate") {
			t.Errorf("process RuntimeClass: %s", out)
		}
	})
	t.Run("root-refused", func(t *testing.T) {
		e.waitRevisionFailed(t, "root-runc-00001", "CreateContainerConfigError", "image.user", "root is refused by the operator's policy")
	})
	t.Run("capability-beyond-the-policy-refused", func(t *testing.T) {
		e.waitRevisionFailed(t, "sysadmin-runc-00001", "CreateContainerConfigError", "securityContext.capabilities.add[0]", "adding SYS_ADMIN is not allowed by the operator's policy")
	})
	t.Run("policy-in-the-container", func(t *testing.T) {
		e.waitReady(t, "policy-runc")
		startup := e.waitLogs(t, 1, "startup-done", "policy-runc")
		status := ctProcStatus(startup)
		// NET_BIND_SERVICE and the NET_RAW added, in the bounding set;
		// none effective for uid 65532.
		if status["CapBnd"] != "0000000000002400" || status["CapEff"] != "0000000000000000" || status["Seccomp"] != "2" {
			t.Errorf("/proc/self/status %v: want CapBnd 2400, CapEff 0, Seccomp 2", status)
		}
		for _, want := range []string{"mkdir=refused", "pids.max=321", "cpuinfo-bytes=0"} {
			if !strings.Contains(startup, want) {
				t.Errorf("no %q in the startup output:\n%s", want, startup)
			}
		}
	})
}

// waitRevisionFailed waits until the Revision's Ready condition is False
// with reason and a message that contains each of msgs.
func (e *contractEnv) waitRevisionFailed(t *testing.T, rev, reason string, msgs ...string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		conds := e.conditions(t, "rev/"+rev)
		for _, c := range conds {
			if c.Type != "Ready" || c.Status != "False" || c.Reason != reason {
				continue
			}
			ok := true
			for _, m := range msgs {
				ok = ok && strings.Contains(c.Message, m)
			}
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("rev/%s: want Ready False (%s) with %q; conditions: %s", rev, reason, msgs, ctConditionsString(conds))
		}
		time.Sleep(time.Second)
	}
}
