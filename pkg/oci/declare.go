package oci

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Declare writes into pod, in Kubernetes' own terms, the security settings
// that Build gives every container whatever its spec says, where the spec
// leaves them unset, so that a policy reading pod specs (Pod Security
// admission) judges what actually runs. It never changes a value the spec
// sets, and declares only what Build guarantees under policy p:
//
//   - allowPrivilegeEscalation: false (Build always sets noNewPrivileges);
//   - seccompProfile: RuntimeDefault (Build always applies a profile, the
//     default or the operator's, unless the operator's policy is
//     Unconfined);
//   - capabilities drop ALL, plus the ones that remain added, when the set
//     Build computes for the container holds nothing beyond
//     NET_BIND_SERVICE;
//   - runAsNonRoot: true when the operator refuses root (p.RefuseRoot).
//
// Declare must change with Build: TestDeclareMatchesBuild holds them
// together.
func Declare(pod *corev1.PodSpec, p Policy) {
	psc := pod.SecurityContext
	podSeccomp := psc != nil && psc.SeccompProfile != nil && psc.SeccompProfile.Type != ""
	podNonRoot := psc != nil && psc.RunAsNonRoot != nil
	for _, cs := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
		for i := range cs {
			c := &cs[i]
			sc := c.SecurityContext.DeepCopy()
			if sc == nil {
				sc = &corev1.SecurityContext{}
			}
			if sc.AllowPrivilegeEscalation == nil {
				f := false
				sc.AllowPrivilegeEscalation = &f
			}
			if !p.Unconfined && !podSeccomp && (sc.SeccompProfile == nil || sc.SeccompProfile.Type == "") {
				sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
			}
			if caps, err := capabilities(c.SecurityContext, p, 0); err == nil && onlyBindService(caps.Bounding) {
				declared := &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
				if sc.Capabilities != nil {
					declared = sc.Capabilities.DeepCopy()
					if !slices.ContainsFunc(declared.Drop, func(d corev1.Capability) bool { return strings.EqualFold(string(d), "ALL") }) {
						declared.Drop = append(declared.Drop, "ALL")
					}
				}
				declared.Add = nil
				for _, c := range caps.Bounding {
					declared.Add = append(declared.Add, corev1.Capability(strings.TrimPrefix(c, "CAP_")))
				}
				sc.Capabilities = declared
			}
			if p.RefuseRoot && !podNonRoot && sc.RunAsNonRoot == nil {
				t := true
				sc.RunAsNonRoot = &t
			}
			c.SecurityContext = sc
		}
	}
}

func onlyBindService(set []string) bool {
	for _, c := range set {
		if c != "CAP_NET_BIND_SERVICE" {
			return false
		}
	}
	return true
}
