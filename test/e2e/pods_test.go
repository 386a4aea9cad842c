package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// syncBuf is a bytes.Buffer for a process's output read while it runs.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startKubectl runs kubectl in the background until the test ends (at
// most 3 minutes); its output is in the returned buffer.
func (e *contractEnv) startKubectl(t *testing.T, args ...string) (*syncBuf, func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd := exec.CommandContext(ctx, e.k.bin, args...)
	cmd.Env = append(os.Environ(), e.k.env...)
	out := &syncBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return out, stop
}

// awaitOutput waits until cond holds of what f returns.
func awaitOutput(t *testing.T, what string, timeout time.Duration, f func() string, cond func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := f()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last:\n%s", what, timeout, s)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestKubectlPods drives a Revision's instances as Pods with the real
// kubectl: get pods -l, the Pod's labels, owner and status, logs -l -c -f,
// logs --tail/--timestamps/--previous after a crash (restart count and
// last termination message), and delete pod with the Revision replacing
// it.
func TestKubectlPods(t *testing.T) {
	e := newContractEnv(t)
	const rc = "runc"
	svc := contractService("pods", rc, corev1.Container{Image: e.infoRef})
	svc.Spec.Template.Annotations = map[string]string{"autoscaling.knative.dev/min-scale": "1"}
	e.apply(t, svc)
	name := svc.Name
	e.waitReady(t, name)
	sel := "serving.knative.dev/service=" + name

	get := func() string { out, _ := e.kubectlRun(t, "", "get", "pods", "-l", sel, "--no-headers"); return out }
	out := awaitOutput(t, "a running pod", time.Minute, get, func(s string) bool {
		f := strings.Fields(s)
		return len(f) >= 3 && f[1] == "1/1" && f[2] == "Running"
	})
	pod := strings.Fields(out)[0]
	if !strings.HasPrefix(pod, name+"-00001-deployment-") {
		t.Errorf("pod name %q, want <revision>-deployment-<suffix> as Knative's", pod)
	}
	jp := func(path string) string {
		return e.kubectl(t, "", "get", "pod", pod, "-o", "jsonpath="+path)
	}
	for path, want := range map[string]string{
		"{.metadata.labels.serving\\.knative\\.dev/configuration}": name,
		"{.metadata.labels.serving\\.knative\\.dev/revision}":      name + "-00001",
		"{.metadata.labels.app}":                                   name + "-00001",
		"{.metadata.ownerReferences[0].kind}":                      "Revision",
		"{.metadata.ownerReferences[0].name}":                      name + "-00001",
		"{.status.phase}":                                          "Running",
		"{.status.containerStatuses[0].name}":                      "user-container",
		"{.status.containerStatuses[0].ready}":                     "true",
	} {
		if got := jp(path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if uid := jp("{.metadata.labels.serving\\.knative\\.dev/revisionUID}"); uid == "" || uid != e.kubectl(t, "", "get", "rev", name+"-00001", "-o", "jsonpath={.metadata.uid}") {
		t.Errorf("revisionUID label %q, want the Revision's UID", uid)
	}

	if d := e.kubectl(t, "", "describe", "pod", pod); !strings.Contains(d, "user-container") || !regexp.MustCompile(`Controlled By:\s+Revision/`+name+`-00001`).MatchString(d) {
		t.Errorf("describe pod:\n%s", d)
	}
	// The instance's events, about its Pod (kind, name and UID), as the
	// kubelet records them: kubectl describe pod shows them.
	describe := func() string { out, _ := e.kubectlRun(t, "", "describe", "pod", pod); return out }
	awaitOutput(t, "the pod's events in describe pod", time.Minute, describe, func(s string) bool {
		return regexp.MustCompile(`Normal\s+Pulled\s+\S+\s+kubelet\s+`).MatchString(s) &&
			regexp.MustCompile(`Normal\s+Created\s+\S+\s+kubelet\s+Created container user-container`).MatchString(s) &&
			regexp.MustCompile(`Normal\s+Started\s+\S+\s+kubelet\s+Started container user-container`).MatchString(s)
	})
	uid := jp("{.metadata.uid}")
	if ev := e.kubectl(t, "", "get", "events", "--field-selector", "involvedObject.kind=Pod,involvedObject.uid="+uid+",reason=Started", "-o", "name"); ev == "" {
		t.Errorf("no Started event about the Pod's UID %s", uid)
	}

	if d := e.kubectl(t, "", "describe", "ksvc", name); !strings.Contains(d, "Ready") || !strings.Contains(d, name+"-00001") {
		t.Errorf("describe ksvc:\n%s", d)
	}
	if wide := e.kubectl(t, "", "get", "pods", "-l", sel, "-o", "wide"); !strings.Contains(wide, "knbox") || !strings.Contains(wide, "NODE") {
		t.Errorf("get pods -o wide:\n%s", wide)
	}
	watch, stopWatch := e.startKubectl(t, "get", "pods", "-l", sel, "-w")
	awaitOutput(t, "the pod in get pods -w", time.Minute, watch.String, func(s string) bool { return strings.Contains(s, pod) })
	stopWatch()

	// logs -l -c -f: a line the container prints arrives.
	logs, stopLogs := e.startKubectl(t, "logs", "-l", sel, "-c", "user-container", "-f")
	// kubectl connects after listing the pods: print until a line arrives.
	awaitOutput(t, "the followed line", time.Minute, func() string {
		e.mustGet(t, name, "/log?msg=followed-line-1")
		return logs.String()
	}, func(s string) bool { return strings.Contains(s, "followed-line-1") })
	stopLogs()
	if tail := e.kubectl(t, "", "logs", pod, "--tail=1", "--timestamps"); len(strings.Fields(tail)) < 2 {
		t.Errorf("logs --tail=1 --timestamps: %q", tail)
	} else if _, err := time.Parse(time.RFC3339Nano, strings.Fields(tail)[0]); err != nil || strings.Count(strings.TrimSpace(tail), "\n") != 0 {
		t.Errorf("logs --tail=1 --timestamps: %q (%v)", tail, err)
	}

	// A crash: the restart count, the last termination and --previous.
	_, _, _ = e.get(t, name, "/exit?code=3&msg=crashed-on-purpose", 30*time.Second)
	awaitOutput(t, "a restart", 2*time.Minute, func() string { return jp("{.status.containerStatuses[0].restartCount}") },
		func(s string) bool { n, _ := strconv.Atoi(s); return n >= 1 })
	if got := jp("{.status.containerStatuses[0].lastState.terminated.exitCode}"); got != "3" {
		t.Errorf("last exit code %q, want 3", got)
	}
	if got := jp("{.status.containerStatuses[0].lastState.terminated.message}"); got != "crashed-on-purpose" {
		t.Errorf("last termination message %q", got)
	}
	if prev := e.kubectl(t, "", "logs", pod, "--previous"); !strings.Contains(prev, "exiting with code 3") || !strings.Contains(prev, "followed-line-1") {
		t.Errorf("logs --previous:\n%s", prev)
	}
	if cur, _ := e.kubectlRun(t, "", "logs", pod); !strings.Contains(cur, "exiting with code 3") {
		t.Errorf("logs (all runs):\n%s", cur)
	}
	// The restart is told about the Pod: started again (the events'
	// count grows), or backing off.
	awaitOutput(t, "the restart in the pod's events", time.Minute, describe, func(s string) bool {
		return regexp.MustCompile(`Started\s+\S+ \(x[2-9]`).MatchString(s) || strings.Contains(s, "BackOff")
	})

	// Read-only but for delete.
	if out, err := e.kubectlRun(t, "", "label", "pod", pod, "x=y"); err == nil || !strings.Contains(out, "not supported") {
		t.Errorf("kubectl label pod: %v\n%s", err, out)
	}
	// delete pod: gone (kubectl waits), and the Revision makes another.
	e.kubectl(t, "", "delete", "pod", pod, "--timeout=2m")
	awaitOutput(t, "another running pod", 2*time.Minute, get, func(s string) bool {
		f := strings.Fields(s)
		return len(f) >= 3 && f[0] != pod && f[1] == "1/1" && f[2] == "Running" && !strings.Contains(s, pod)
	})
	e.mustGet(t, name, "/")
}

// TestKubectlExecPortForward runs kubectl exec and kubectl port-forward
// into runc and runsc instances: the command's output, its exit code, its
// stdin, the container's environment, and an HTTP request through a
// forwarded port.
func TestKubectlExecPortForward(t *testing.T) {
	e := newContractEnv(t)
	for _, rc := range contractRuntimeClasses {
		svc := contractService("xpf", rc, corev1.Container{Image: e.toolRef})
		svc.Spec.Template.Annotations = map[string]string{"autoscaling.knative.dev/min-scale": "1"}
		e.apply(t, svc)
	}
	for _, rc := range contractRuntimeClasses {
		t.Run(rc, func(t *testing.T) {
			name := "xpf-" + rc
			e.waitReady(t, name)
			sel := "serving.knative.dev/service=" + name
			out := awaitOutput(t, "a running pod", time.Minute, func() string {
				out, _ := e.kubectlRun(t, "", "get", "pods", "-l", sel, "--no-headers")
				return out
			}, func(s string) bool { f := strings.Fields(s); return len(f) >= 3 && f[2] == "Running" })
			pod := strings.Fields(out)[0]

			if got := e.kubectl(t, "", "exec", pod, "--", "sh", "-c", "echo $K_SERVICE; echo to-stderr >&2"); !strings.Contains(got, name) || !strings.Contains(got, "to-stderr") {
				t.Errorf("exec: %q, want K_SERVICE and stderr", got)
			}
			// kubectl 1.30+ tries WebSocket (v5.channel.k8s.io, which the
			// v0.29 streaming code does not speak) and falls back to SPDY,
			// as against a 1.29 cluster. The kubectl CI installs is 1.29;
			// where a newer one lies beside it (gcloud's dispatcher), it
			// runs too.
			if newer := newerKubectl(e.k.bin); newer != "" {
				got, err := run(t, e.k.env, "in\n", newer, "exec", "-i", pod, "--", "sh", "-c", "cat; exit 4")
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 4 || !strings.Contains(got, "in") {
					t.Errorf("%s exec: %v %q, want its output and exit code 4", newer, err, got)
				}
			} else {
				t.Log("no kubectl 1.32 beside kubectl: only it runs")
			}
			if got := e.kubectl(t, "hello from stdin\n", "exec", "-i", pod, "-c", "user-container", "--", "cat"); got != "hello from stdin\n" {
				t.Errorf("exec -i cat: %q", got)
			}
			out, err := e.kubectlRun(t, "", "exec", pod, "--", "sh", "-c", "exit 7")
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 7 {
				t.Errorf("exec of exit 7: %v %q, want kubectl to exit 7", err, out)
			}
			if out, err := e.kubectlRun(t, "", "exec", pod, "-c", "nope", "--", "true"); err == nil || !strings.Contains(out, "not valid") {
				t.Errorf("exec into no such container: %v %q", err, out)
			}

			addr := freePort(t)
			_, port, _ := net.SplitHostPort(addr)
			pf, _ := e.startKubectl(t, "port-forward", "pod/"+pod, port+":8080")
			client := &http.Client{Timeout: 10 * time.Second}
			awaitOutput(t, "an answer through the forwarded port", time.Minute, func() string {
				resp, err := client.Get("http://" + addr + "/")
				if err != nil {
					return err.Error() + "\n" + pf.String()
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				return strconv.Itoa(resp.StatusCode) + " " + string(b)
			}, func(s string) bool { return strings.HasPrefix(s, "200 ") && strings.Contains(s, name) })
		})
	}
}

// TestExecProbesOperatorSwitch: with policy.allowExecProbes an exec
// readiness probe is admitted and runs in the container (runc and runsc):
// the Revision is ready only once the command succeeds, and an exec
// liveness probe that fails restarts the container. (Refused by default:
// TestRuntimeContract's checkExecProbeRefused.)
func TestExecProbesOperatorSwitch(t *testing.T) {
	cfg := ctConfigFile(t, "policy:\n  allowExecProbes: true\n")
	e := newContractEnv(t, "--config", cfg)
	for _, rc := range contractRuntimeClasses {
		c := corev1.Container{Image: e.toolRef,
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "test -x /app"}}}},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "test ! -e /tmp/sick"}}},
				PeriodSeconds: 1, FailureThreshold: 1},
		}
		svc := contractService("xprobe", rc, c)
		svc.Spec.Template.Annotations = map[string]string{"autoscaling.knative.dev/min-scale": "1"}
		e.apply(t, svc)
	}
	for _, rc := range contractRuntimeClasses {
		t.Run(rc, func(t *testing.T) {
			name := "xprobe-" + rc
			e.waitReady(t, name)
			sel := "serving.knative.dev/service=" + name
			out := awaitOutput(t, "a ready pod", time.Minute, func() string {
				out, _ := e.kubectlRun(t, "", "get", "pods", "-l", sel, "--no-headers")
				return out
			}, func(s string) bool { f := strings.Fields(s); return len(f) >= 3 && f[1] == "1/1" })
			pod := strings.Fields(out)[0]
			e.kubectl(t, "", "exec", pod, "--", "sh", "-c", ": > /tmp/sick")
			awaitOutput(t, "a restart by the exec liveness probe", 2*time.Minute, func() string {
				return e.kubectl(t, "", "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].restartCount}")
			}, func(s string) bool { n, _ := strconv.Atoi(s); return n >= 1 })
		})
	}
}

// newerKubectl is kubectl.1.32 in the directory of kubectl (resolved), if
// there is one.
func newerKubectl(bin string) string {
	p, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return ""
	}
	n := filepath.Join(filepath.Dir(p), "kubectl.1.32")
	if _, err := os.Stat(n); err != nil {
		return ""
	}
	return n
}
