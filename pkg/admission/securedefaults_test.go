package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/knbox/knbox/pkg/oci"
)

// TestInsecureDefaultWarnings: Knative warns about securityContext fields
// left unset; knbox keeps only the warnings its runtime does not make
// untrue (by default runAsNonRoot's), and none when the operator's policy
// applies everything secure-pod-defaults sets.
func TestInsecureDefaultWarnings(t *testing.T) {
	gr := ksvcGR
	for _, tc := range []struct {
		name   string
		policy oci.Policy
		mutate func(*corev1.PodSpec)
		want   []string // field names still warned about
	}{
		{name: "defaults", want: []string{"runAsNonRoot"}},
		{name: "runAsNonRoot set", mutate: func(p *corev1.PodSpec) {
			t := true
			p.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsNonRoot: &t}
		}},
		{name: "refuseRoot", policy: oci.Policy{RefuseRoot: true}},
		{name: "unconfined", policy: oci.Policy{Unconfined: true}, want: []string{"runAsNonRoot", "seccompProfile"}},
		{name: "extra capabilities", policy: oci.Policy{DefaultCapabilities: []string{"CAP_NET_BIND_SERVICE", "CAP_CHOWN"}},
			want: []string{"capabilities", "runAsNonRoot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTenantEnv(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
			e.a.InstanceDefaults = func(p *corev1.PodSpec) { oci.Declare(p, tc.policy) }
			warns, errs, err := e.admit(t, Create, service("default", "s", tc.mutate), nil, gr)
			if err != nil || len(errs) > 0 {
				t.Fatalf("admit: %v %v", err, errs)
			}
			var got []string
			for _, w := range warns {
				if !strings.HasPrefix(w, insecureDefault) {
					continue
				}
				for _, f := range []string{"allowPrivilegeEscalation", "capabilities", "runAsNonRoot", "seccompProfile"} {
					if strings.Contains(w, "securityContext."+f) {
						got = append(got, f)
					}
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("warned about %v, want %v (warnings %q)", got, tc.want, warns)
			}
		})
	}
}
