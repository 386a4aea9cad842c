package pod

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestExecProbeCheck: an exec probe passes on exit 0, fails naming the
// exit code and output otherwise, and is refused unless allowed.
func TestExecProbeCheck(t *testing.T) {
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"check"}}}}
	for _, tc := range []struct {
		code    int
		err     error
		wantErr string
	}{
		{code: 0},
		{code: 3, wantErr: "exited with 3: out"},
		{code: -1, err: errors.New("no such container"), wantErr: "no such container"},
	} {
		p := &prober{probe: probe, exec: func(context.Context, []string) (int, string, error) { return tc.code, "out", tc.err }}
		err := p.check(context.Background())
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("exit %d %v: %v, want %q", tc.code, tc.err, err, tc.wantErr)
		}
	}
	if err := CheckProbe("readinessProbe", probe); err == nil {
		t.Error("an exec probe passed CheckProbe")
	}
	if err := CheckProbeExec("readinessProbe", probe); err != nil {
		t.Errorf("CheckProbeExec: %v", err)
	}
	empty := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{}}}
	if err := CheckProbeExec("readinessProbe", empty); err == nil {
		t.Error("an exec probe without a command passed")
	}
}
