package admission

import (
	"regexp"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/apis"
)

// insecureDefault is the message of Knative's warning about a container
// securityContext field left unset while config-features'
// secure-pod-defaults is off.
const insecureDefault = "Kubernetes default value is insecure, Knative may default this to secure in a future release"

// insecurePath matches the field paths of that warning.
var insecurePath = regexp.MustCompile(`(^|\.)(containers|initContainers)\[(\d+)\]\.securityContext\.(runAsNonRoot|allowPrivilegeEscalation|seccompProfile|seccompProfile\.type|capabilities|capabilities\.drop)$`)

// dropUntrueWarnings removes from fe the paths of Knative's "default value
// is insecure" warning that knbox's runtime makes untrue: what
// InstanceDefaults declares (the settings every container gets whatever its
// spec says, such as noNewPrivileges, which is allowPrivilegeEscalation
// false) is not an insecure default on knbox. The rest stay, word for word:
// by default runAsNonRoot's, since knbox runs an image's root user as root
// unless the operator sets policy.refuseRoot.
//
// This is how knbox honours Knative's secure-pod-defaults without turning
// the flag on for everyone: the flag would also default runAsNonRoot to
// true, failing every image whose USER is root, which Knative's own default
// does not. An operator who wants Knative's behaviour sets it in
// config-features; with policy.refuseRoot knbox turns it on itself (see
// config.Config.Serving).
func (a *Admitter) dropUntrueWarnings(obj runtime.Object, fe *apis.FieldError) *apis.FieldError {
	if fe == nil || a.InstanceDefaults == nil {
		return fe
	}
	_, pod, err := knativePods{}.ExtractPodSpec(obj)
	if err != nil {
		return fe
	}
	declared := pod.DeepCopy()
	a.InstanceDefaults(declared)
	var out *apis.FieldError
	for _, e := range fe.WrappedErrors() {
		if e.Level != apis.WarningLevel || e.Message != insecureDefault {
			out = out.Also(e)
			continue
		}
		kept := *e
		kept.Paths = nil
		for _, p := range e.Paths {
			if !declaredSecure(declared, p) {
				kept.Paths = append(kept.Paths, p)
			}
		}
		if len(kept.Paths) > 0 {
			out = out.Also(&kept)
		}
	}
	return out
}

// declaredSecure tells whether the field a warning path names is set in
// the declared pod spec (at the container or, where Kubernetes has one, at
// the pod level).
func declaredSecure(pod *corev1.PodSpec, path string) bool {
	m := insecurePath.FindStringSubmatch(path)
	if m == nil {
		return false
	}
	cs := pod.Containers
	if m[2] == "initContainers" {
		cs = pod.InitContainers
	}
	i, err := strconv.Atoi(m[3])
	if err != nil || i >= len(cs) {
		return false
	}
	sc := cs[i].SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	switch m[4] {
	case "runAsNonRoot":
		return (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
	case "allowPrivilegeEscalation":
		return sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	case "seccompProfile", "seccompProfile.type":
		return (sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault) ||
			(psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault)
	case "capabilities", "capabilities.drop":
		return sc.Capabilities != nil && len(sc.Capabilities.Drop) > 0
	}
	return false
}
