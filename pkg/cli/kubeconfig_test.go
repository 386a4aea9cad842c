package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/knbox/knbox/pkg/admission"
	"github.com/knbox/knbox/pkg/apiserver/apiservertest"
)

// whoami connects with a kubeconfig file and says who the server sees.
func whoami(t *testing.T, path string) (string, string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %04o, want 0600", path, fi.Mode().Perm())
	}
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*raw, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := kube.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.UserInfo.Username, raw.Contexts[raw.CurrentContext].Namespace
}

func TestKubeconfigForUsers(t *testing.T) {
	dir := t.TempDir()
	env := apiservertest.StartWith(t, apiservertest.Options{Dir: dir, Users: map[string]admission.User{"alice-secret": {Name: "alice"}}})
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", "")
	out := filepath.Join(t.TempDir(), "kc")

	// A file that exists with a wider mode is replaced by a 0600 one.
	if err := os.WriteFile(out, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := run(t, nil, "", "kubeconfig", "--data-dir", dir, "--user", "system:serviceaccount:default:deployer", "--duration", "2h", "-o", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "the token expires at") || !strings.Contains(stderr, "(mode 0600)") {
		t.Errorf("stderr: %s", stderr)
	}
	if who, ns := whoami(t, out); who != "system:serviceaccount:default:deployer" || ns != "default" {
		t.Errorf("service account kubeconfig is %s in %s", who, ns)
	}

	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("alice-secret,alice,1,\"devs\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, nil, "", "kubeconfig", "--data-dir", dir, "--user", "alice", "--token-auth-file", tokens, "-n", "team-a", "-o", out); err != nil {
		t.Fatal(err)
	}
	if who, ns := whoami(t, out); who != "alice" || ns != "team-a" {
		t.Errorf("token file kubeconfig is %s in %s", who, ns)
	}
	// Printed, it is the same kind of file.
	printed, _, err := run(t, nil, "", "kubeconfig", "--data-dir", dir, "--user", "alice", "--token-auth-file", tokens)
	if err != nil || !strings.Contains(printed, "current-context: alice@knbox") || !strings.Contains(printed, "token: alice-secret") {
		t.Errorf("printed: %v\n%s", err, printed)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--user", "alice"}, "--token-auth-file"},
		{[]string{"--user", "mallory", "--token-auth-file", tokens}, `no user "mallory"`},
		{[]string{"--user", "system:serviceaccount:default:nobody"}, "not found"},
		{[]string{"--duration", "1h"}, "go with --user"},
		{[]string{"--user", "system:serviceaccount:default:deployer", "--duration", "1m"}, "10 minutes"},
	} {
		_, _, err := run(t, nil, "", append([]string{"kubeconfig", "--data-dir", dir}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}
