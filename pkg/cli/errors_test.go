package cli

import (
	"strings"
	"testing"

	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

// TestDidYouMean: a resource type the server does not serve gets the
// closest name it does serve, in every command that takes types.
func TestDidYouMean(t *testing.T) {
	t.Parallel()
	env := apiservertest.Start(t, "")
	for _, tt := range []struct{ args, want string }{
		{"get ksvcs", `the server doesn't have a resource type "ksvcs"; did you mean "ksvc"?`},
		{"get revison", `the server doesn't have a resource type "revison"; did you mean "revision"?`},
		// svc is served: core/v1 Services (knative-serving/knbox-ingress).
		{"get ksv", `the server doesn't have a resource type "ksv"; did you mean "ksvc"?`},
		{"get Rts", `the server doesn't have a resource type "Rts"; did you mean "rt"?`},
		{"get runtime", `the server doesn't have a resource type "runtime"; did you mean "runtimeclass"?`},
		{"get statefulsets", `the server doesn't have a resource type "statefulsets"`},
		{"get deployments.apps", `the server doesn't have a resource type "deployments"`},
		{"get x", `the server doesn't have a resource type "x"`},
		{"get KSVC", `the server doesn't have a resource type "KSVC"; did you mean "ksvc"?`},
		{"describe ksvcs hello", `the server doesn't have a resource type "ksvcs"; did you mean "ksvc"?`},
		{"delete routs hello", `the server doesn't have a resource type "routs"; did you mean "route"?`},
		{"wait --for=delete configurtion/hello", `the server doesn't have a resource type "configurtion"; did you mean "configuration"?`},
	} {
		_, _, err := run(t, nil, "", append(strings.Fields(tt.args), "--kubeconfig", env.Kubeconfig)...)
		if err == nil || err.Error() != tt.want {
			t.Errorf("knbox %s: err = %v, want %s", tt.args, err, tt.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"a", "", 1}, {"ksvcs", "ksvc", 1}, {"kitten", "sitting", 3}, {"rev", "rte", 2}} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
