package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// tokenServiceYAML is a Service whose container mounts a projected
// ServiceAccount token of ServiceAccount robot, for the API's audience.
const tokenServiceYAML = `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: tokened
spec:
  template:
    spec:
      runtimeClassName: runc
      serviceAccountName: robot
      containers:
      - image: %s
        volumeMounts:
        - name: token
          mountPath: /var/run/secrets/tokens
          readOnly: true
      volumes:
      - name: token
        projected:
          sources:
          - serviceAccountToken:
              path: api-token
              expirationSeconds: 600
`

// TestProjectedServiceAccountToken: a Service mounts a projected
// ServiceAccount token; the token the instance holds is authorized by RBAC
// (a RoleBinding gives its ServiceAccount get on services in its namespace:
// allowed there, 403 in another namespace), refused (401) once the
// ServiceAccount is deleted, and replaced in the running instance by one
// that works again when the ServiceAccount is made anew.
//
// The test reads the token from inside the instance (runtime-info's /file,
// through the router) and calls the API with it from outside, with kubectl;
// TestInstanceCallsAPI calls the API from inside instances.
func TestProjectedServiceAccountToken(t *testing.T) {
	requireTool(t, "runc")
	k := newKubectl(t)
	reg := imagetest.StartRegistry(t)
	bin := imagetest.BuildGo(t, "github.com/knbox/knbox/test/images/runtime-info")
	ref := imagetest.PushImage(t, reg, "runtime-info:token", image.Config{Entrypoint: []string{"/app"}},
		append(imagetest.BaseFiles(), imagetest.File{Path: "app", Mode: 0o755, Body: bin}))
	awaitOK(t, 90*time.Second, "the runc RuntimeClass", func() (string, error) { return k.run("", "get", "runtimeclass", "runc") })

	k.must("", "create", "serviceaccount", "robot")
	k.must("", "create", "namespace", "other")
	k.must("", "create", "role", "ksvc-reader", "--verb=get", "--resource=services.serving.knative.dev")
	k.must("", "create", "rolebinding", "robot-reads", "--role=ksvc-reader", "--serviceaccount=default:robot")
	k.must("", "create", "role", "ksvc-reader", "--verb=get", "--resource=services.serving.knative.dev", "-n", "other")
	k.must(fmt.Sprintf(tokenServiceYAML, ref), "apply", "-f", "-")
	awaitOK(t, 4*time.Minute, "ksvc tokened Ready", func() (string, error) {
		return k.run("", "wait", "ksvc/tokened", "--for=condition=Ready", "--timeout=50s")
	})
	host := strings.TrimPrefix(k.must("", "get", "ksvc", "tokened", "-o", "jsonpath={.status.url}"), "http://")
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, k.srv.httpAddr)
		},
		DisableKeepAlives: true,
	}}
	readToken := func() string {
		t.Helper()
		resp, err := client.Get("http://" + host + "/file?path=/var/run/secrets/tokens/api-token")
		if err != nil {
			t.Fatalf("read the token from the instance: %v", err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("read the token from the instance: %s %v: %s", resp.Status, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	as := func(token string, args ...string) (string, error) {
		return k.run("", append([]string{"--token=" + token}, args...)...)
	}

	token := readToken()
	t.Logf("instance token: %.40s...", token)
	if strings.Count(token, ".") != 2 {
		t.Fatalf("the instance's token %q is not a JWT", token)
	}
	if out, err := as(token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || out != "system:serviceaccount:default:robot" {
		t.Errorf("whoami with the instance's token: %q %v", out, err)
	}
	if out, err := as(token, "get", "ksvc", "tokened", "-o", "name"); err != nil || strings.TrimSpace(out) != "service.serving.knative.dev/tokened" {
		t.Errorf("get ksvc in its own namespace: %v\n%s", err, out)
	}
	if out, err := as(token, "get", "ksvc", "tokened", "-n", "other"); err == nil || !strings.Contains(out, "forbidden") ||
		!strings.Contains(out, `User "system:serviceaccount:default:robot" cannot get resource "services" in API group "serving.knative.dev" in the namespace "other"`) {
		t.Errorf("get ksvc in another namespace: want 403, got %v\n%s", err, out)
	}
	if out, err := as(token, "delete", "ksvc", "tokened"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("delete, which the role does not grant: want 403, got %v\n%s", err, out)
	}

	// The ServiceAccount goes: its tokens stop working at once.
	k.must("", "delete", "serviceaccount", "robot")
	awaitOK(t, 30*time.Second, "the deleted ServiceAccount's token refused", func() (string, error) {
		out, err := as(token, "get", "ksvc", "tokened")
		if err != nil && strings.Contains(out, "Unauthorized") {
			return out, nil
		}
		return out, fmt.Errorf("not refused with 401")
	})

	// Made anew (a new UID): the instance gets a new token in place, which
	// works; the old one stays refused.
	k.must("", "create", "serviceaccount", "robot")
	var fresh string
	awaitOK(t, 60*time.Second, "a new token in the running instance", func() (string, error) {
		if fresh = readToken(); fresh == token {
			return "", fmt.Errorf("the instance still holds the old token")
		}
		return "", nil
	})
	t.Logf("new token: %.40s...", fresh)
	if out, err := as(fresh, "get", "ksvc", "tokened", "-o", "name"); err != nil {
		t.Errorf("the new token: %v\n%s", err, out)
	}
	if out, err := as(token, "get", "ksvc", "tokened"); err == nil || !strings.Contains(out, "Unauthorized") {
		t.Errorf("the old token after the ServiceAccount was made anew: want 401, got %v\n%s", err, out)
	}
}

// awaitOK calls f until it succeeds, failing t with its last output after
// timeout.
func awaitOK(t *testing.T, timeout time.Duration, what string, f func() (string, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v\n%s", what, timeout, err, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
