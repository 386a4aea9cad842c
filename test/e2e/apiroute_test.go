package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// apiCallerYAML is a Service of ServiceAccount robot that mounts nothing
// itself: the ServiceAccount volume comes as on a cluster. %[1]s is the
// name, %[2]s the RuntimeClass, %[3]s the image, %[4]s more of the pod spec.
const apiCallerYAML = `apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: %[1]s
spec:
  template:
    spec:
      runtimeClassName: %[2]s
      serviceAccountName: robot
%[4]s      containers:
      - image: %[3]s
`

// TestInstanceCallsAPI: from inside instances under runc and runsc, a
// client configured as client-go's rest.InClusterConfig is (and, under
// runc, client-go itself)
// (KUBERNETES_SERVICE_HOST/PORT, the automounted token and ca.crt, TLS
// verified against that CA alone) reaches knbox's API, also by the names
// kubernetes, kubernetes.default.svc and kubernetes.default.svc.cluster.local:
// 200 under a RoleBinding, 403 in another namespace, 401 once the
// ServiceAccount is deleted. A revision with automountServiceAccountToken:
// false gets no token. Instances still reach nothing else of the host
// (TestEgress and the isolation tests).
func TestInstanceCallsAPI(t *testing.T) {
	requireTool(t, "runc")
	requireTool(t, "runsc")
	classes := []string{"runc", "runsc"}
	k := newKubectl(t)
	reg := imagetest.StartRegistry(t)
	bin := imagetest.BuildGo(t, "github.com/knbox/knbox/test/images/runtime-info")
	ref := imagetest.PushImage(t, reg, "runtime-info:api", image.Config{Entrypoint: []string{"/app"}},
		append(imagetest.BaseFiles(), imagetest.File{Path: "app", Mode: 0o755, Body: bin}))
	for _, rc := range classes {
		awaitOK(t, 90*time.Second, "the "+rc+" RuntimeClass", func() (string, error) { return k.run("", "get", "runtimeclass", rc) })
	}

	k.must("", "create", "serviceaccount", "robot")
	k.must("", "create", "namespace", "other")
	for _, ns := range []string{"default", "other"} {
		k.must("", "create", "role", "cm-reader", "--verb=list", "--resource=configmaps", "-n", ns)
	}
	k.must("", "create", "rolebinding", "robot-reads", "--role=cm-reader", "--serviceaccount=default:robot")
	// client-go itself: rest.InClusterConfig() and its HTTP client.
	cgBin := imagetest.BuildGo(t, "github.com/knbox/knbox/test/images/incluster")
	cgRef := imagetest.PushImage(t, reg, "incluster:v1", image.Config{Entrypoint: []string{"/app"}},
		append(imagetest.BaseFiles(), imagetest.File{Path: "app", Mode: 0o755, Body: cgBin}))
	for _, rc := range classes {
		k.must(fmt.Sprintf(apiCallerYAML, "api-"+rc, rc, ref, ""), "apply", "-f", "-")
	}
	k.must(fmt.Sprintf(apiCallerYAML, "nomount", "runc", ref, "      automountServiceAccountToken: false\n"), "apply", "-f", "-")
	k.must(fmt.Sprintf(apiCallerYAML, "clientgo", "runc", cgRef, ""), "apply", "-f", "-")
	for _, name := range append(prefixed("api-", classes), "nomount", "clientgo") {
		awaitOK(t, 4*time.Minute, "ksvc "+name+" Ready", func() (string, error) {
			return k.run("", "wait", "ksvc/"+name, "--for=condition=Ready", "--timeout=50s")
		})
	}
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, k.srv.httpAddr)
		},
		DisableKeepAlives: true,
	}}
	get := func(svc, path string) (int, []byte) {
		t.Helper()
		host := strings.TrimPrefix(k.must("", "get", "ksvc", svc, "-o", "jsonpath={.status.url}"), "http://")
		resp, err := client.Get("http://" + host + path)
		if err != nil {
			t.Fatalf("%s%s: %v", svc, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			t.Fatalf("%s%s: %v", svc, path, err)
		}
		return resp.StatusCode, b
	}
	call := func(svc, host, path string) fetchResult {
		t.Helper()
		q := "/kubeapi?path=" + url.QueryEscape(path)
		if host != "" {
			q += "&host=" + url.QueryEscape(host)
		}
		code, b := get(svc, q)
		var f fetchResult
		if err := json.Unmarshal(b, &f); code != http.StatusOK || err != nil {
			t.Fatalf("%s %s: %d %v\n%s", svc, q, code, err, b)
		}
		return f
	}

	for _, rc := range classes {
		t.Run(rc, func(t *testing.T) {
			svc := "api-" + rc
			code, b := get(svc, "/")
			var info struct {
				Env map[string]string `json:"env"`
			}
			if err := json.Unmarshal(b, &info); code != http.StatusOK || err != nil {
				t.Fatalf("info: %d %v", code, err)
			}
			for name, want := range map[string]string{"KUBERNETES_SERVICE_HOST": "127.0.0.2", "KUBERNETES_SERVICE_PORT": "443",
				"KUBERNETES_SERVICE_PORT_HTTPS": "443", "KUBERNETES_PORT": "tcp://127.0.0.2:443", "KUBERNETES_PORT_443_TCP_ADDR": "127.0.0.2"} {
				if got := info.Env[name]; got != want {
					t.Errorf("env %s=%q, want %q", name, got, want)
				}
			}
			if code, b := get(svc, "/file?path=/var/run/secrets/kubernetes.io/serviceaccount/namespace"); code != http.StatusOK || string(b) != "default" {
				t.Errorf("the mounted namespace file: %d %q", code, b)
			}
			for _, host := range []string{"", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
				f := call(svc, host, "/api/v1/namespaces/default/configmaps")
				if f.Status != http.StatusOK || !strings.Contains(f.Body, `"kube-root-ca.crt"`) {
					t.Errorf("list configmaps of its namespace via %q: %+v", host, f)
				}
				t.Logf("%s via %q: %d in %dµs (a new TLS connection)", rc, host, f.Status, f.Micros)
			}
			if f := call(svc, "", "/api/v1/namespaces/other/configmaps"); f.Status != http.StatusForbidden ||
				!strings.Contains(f.Body, `User \"system:serviceaccount:default:robot\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"other\"`) {
				t.Errorf("list configmaps of another namespace: want 403, got %+v", f)
			}
		})
	}
	if code, b := get("nomount", "/file?path=/var/run/secrets/kubernetes.io/serviceaccount/token"); code == http.StatusOK {
		t.Errorf("automountServiceAccountToken: false, yet a token is mounted: %.40s", b)
	}
	// client-go's rest.InClusterConfig(): 200 at home, 403 elsewhere.
	type cgResult struct {
		Host   string `json:"host"`
		Status int    `json:"status"`
		Body   string `json:"body"`
		Error  string `json:"error"`
	}
	clientGo := func(path string) cgResult {
		t.Helper()
		code, b := get("clientgo", "/get?path="+url.QueryEscape(path))
		var r cgResult
		if err := json.Unmarshal(b, &r); code != http.StatusOK || err != nil {
			t.Fatalf("clientgo %s: %d %v\n%s", path, code, err, b)
		}
		return r
	}
	if r := clientGo("/api/v1/namespaces/default/configmaps"); r.Status != http.StatusOK || r.Host != "https://127.0.0.2:443" || !strings.Contains(r.Body, `"kube-root-ca.crt"`) {
		t.Errorf("client-go in-cluster list in its namespace: %+v", r)
	}
	if r := clientGo("/api/v1/namespaces/other/configmaps"); r.Status != http.StatusForbidden {
		t.Errorf("client-go in-cluster list in another namespace: want 403, got %+v", r)
	}

	// The ServiceAccount goes: the token the instances hold is refused.
	k.must("", "delete", "serviceaccount", "robot")
	awaitOK(t, 30*time.Second, "401 for client-go after the ServiceAccount was deleted", func() (string, error) {
		if r := clientGo("/api/v1/namespaces/default/configmaps"); r.Status != http.StatusUnauthorized {
			return fmt.Sprintf("%+v", r), fmt.Errorf("not refused with 401")
		}
		return "", nil
	})
	for _, rc := range classes {
		awaitOK(t, 30*time.Second, "401 in "+rc+" after the ServiceAccount was deleted", func() (string, error) {
			if f := call("api-"+rc, "", "/api/v1/namespaces/default/configmaps"); f.Status != http.StatusUnauthorized {
				return fmt.Sprintf("%+v", f), fmt.Errorf("not refused with 401")
			}
			return "", nil
		})
	}
}

func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}
