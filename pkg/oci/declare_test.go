package oci

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestDeclareMatchesBuild: what Declare writes into a pod spec is what
// Build does with it, for containers that set nothing, that drop
// capabilities, and under a policy that refuses root.
func TestDeclareMatchesBuild(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		sc     *corev1.SecurityContext
		policy Policy
	}{
		{"nothing set", nil, Policy{}},
		{"drops all", &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}, Policy{}},
		{"drops all, adds bind", &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}}}, Policy{}},
		{"refuses root", &corev1.SecurityContext{RunAsUser: ptr(int64(1000))}, Policy{RefuseRoot: true}},
		{"seccomp unconfined by the operator", nil, Policy{Unconfined: true}},
		{"the operator's wider default set", nil, Policy{DefaultCapabilities: []string{"CAP_CHOWN", "CAP_NET_BIND_SERVICE"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.PodSpec{Containers: []corev1.Container{{Name: "user-container", SecurityContext: tt.sc.DeepCopy()}}}
			Declare(pod, tt.policy)
			d := pod.Containers[0].SecurityContext
			in := baseInput(t)
			in.Container.SecurityContext = tt.sc
			in.Policy = tt.policy
			s := mustBuild(t, in)
			if d.AllowPrivilegeEscalation == nil || *d.AllowPrivilegeEscalation || !s.Process.NoNewPrivileges {
				t.Errorf("declared allowPrivilegeEscalation %v, built noNewPrivileges %v", d.AllowPrivilegeEscalation, s.Process.NoNewPrivileges)
			}
			declared := d.SeccompProfile != nil && d.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
			if declared != (s.Linux.Seccomp != nil) || declared == tt.policy.Unconfined {
				t.Errorf("declared seccomp %v, built %v", d.SeccompProfile, s.Linux.Seccomp != nil)
			}
			built := s.Process.Capabilities.Bounding
			if d.Capabilities != nil && slices.Contains(d.Capabilities.Drop, "ALL") {
				var want []string
				for _, c := range d.Capabilities.Add {
					want = append(want, "CAP_"+string(c))
				}
				if !slices.Equal(built, want) {
					t.Errorf("declared drop ALL add %v, built %v", d.Capabilities.Add, built)
				}
			} else if onlyBindService(built) {
				t.Errorf("built %v but did not declare drop ALL", built)
			}
			if tt.policy.RefuseRoot != (d.RunAsNonRoot != nil && *d.RunAsNonRoot) {
				t.Errorf("declared runAsNonRoot %v with RefuseRoot %v", d.RunAsNonRoot, tt.policy.RefuseRoot)
			}
		})
	}
	// What the spec sets stays as written.
	pod := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", SecurityContext: &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
	}}}}
	Declare(pod, Policy{})
	if sc := pod.Containers[0].SecurityContext; !*sc.AllowPrivilegeEscalation || sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined {
		t.Errorf("Declare changed what the spec sets: %+v", sc)
	}
}
