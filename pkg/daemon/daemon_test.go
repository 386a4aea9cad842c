package daemon

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"

	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/controller"
	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// testWriter routes logs to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestRunWiresEverything runs knbox's server in this process with only the
// process runtime, and follows a Service through everything Run assembles:
// the API (kubeconfig, RuntimeClass registration), the controllers, the
// informer-fed revision manager (a Secret into the environment), the pod
// runtime, the autoscaler, the router on the data address, the log
// subresource and the image endpoints; then cancelling the context stops
// it, instances included.
func TestRunWiresEverything(t *testing.T) {
	imagetest.Require(t, os.Geteuid() == 0, "instances need root (overlay mounts, network namespaces)")
	reg := imagetest.StartRegistry(t)
	ref := imagetest.PushGoImage(t, reg, "runtime-info:daemon", "../../test/images/runtime-info", image.Config{ExposedPorts: []string{"8080/tcp"}})

	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.APIAddr, cfg.HTTPAddr, cfg.Registry.Addr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.InsecureRegistries = []string{reg}
	cfg.DefaultRuntimeClass = "process"
	// Only the process runtime, which the operator must enable (it does not
	// isolate): the OCI ones are "not installed", so their probes cost
	// nothing here (pkg/runtime and pkg/pod test them).
	yes := true
	proc := cfg.Runtimes["process"]
	proc.Enabled = &yes
	cfg.Runtimes["process"] = proc
	for _, n := range []string{"runc", "runsc", "crun"} {
		rt := cfg.Runtimes[n]
		rt.Binary = "/nonexistent/" + n
		cfg.Runtimes[n] = rt
	}
	// This test's exit stops the instances and keeps no socket.
	keep := false
	cfg.Restart.KeepInstances, cfg.Restart.HandoverTimeout = &keep, "0s"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type addrs struct{ api, data string }
	up := make(chan addrs, 1)
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	go func() { done <- Run(ctx, cfg, log, func(api, data string) { up <- addrs{api, data} }) }()
	var a addrs
	select {
	case a = <-up:
	case err := <-done:
		t.Fatalf("Run ended before it was ready: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("not ready within 2 minutes")
	}

	kcPath := filepath.Join(cfg.DataDir, KubeconfigFile)
	if fi, err := os.Stat(kcPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v, %v", fi, err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kcPath)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != a.api {
		t.Errorf("kubeconfig names %s, the API is at %s", rc.Host, a.api)
	}
	rc.WarningHandler = rest.NoWarnings{}
	kube := kubernetes.NewForConfigOrDie(rc)
	sc := servingclient.NewForConfigOrDie(rc)

	rcs, err := kube.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var classes []string
	for _, c := range rcs.Items {
		if c.Labels[controller.BuiltinLabel] == "true" {
			classes = append(classes, c.Name)
		}
	}
	if strings.Join(classes, ",") != "process" {
		t.Errorf("registered RuntimeClasses %v, want [process] (the only handler that works here)", classes)
	}

	if _, err := kube.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"password": "s3cret"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &servingv1.Service{ObjectMeta: metav1.ObjectMeta{Name: "wired", Namespace: "default"}}
	nobody := int64(65534) // the process runtime refuses root
	svc.Spec.Template.Spec.Containers = []corev1.Container{{Image: ref, Env: []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}}},
		SecurityContext: &corev1.SecurityContext{RunAsUser: &nobody}}}
	if _, err := sc.ServingV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var host string
	eventually(t, 2*time.Minute, "the Service ready", func() error {
		s, err := sc.ServingV1().Services("default").Get(ctx, "wired", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !s.IsReady() || s.Status.URL == nil {
			return fmt.Errorf("status %+v", s.Status)
		}
		host = s.Status.URL.Host
		return nil
	})
	rev, err := sc.ServingV1().Revisions("default").Get(ctx, "wired-00001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := a.api + "/apis/serving.knative.dev/v1/namespaces/default/revisions/wired-00001/log"; rev.Status.LogURL != want {
		t.Errorf("logUrl %q, want %q", rev.Status.LogURL, want)
	}
	if c := rev.Status.GetCondition(servingv1.RevisionConditionActive); c == nil || !c.IsTrue() {
		t.Errorf("Active %+v, want True (the autoscaler's)", c)
	}

	// Through the router on the data address.
	req, _ := http.NewRequest(http.MethodGet, a.data+"/", nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Env map[string]string `json:"env"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || info.Env["PASSWORD"] != "s3cret" || info.Env["K_REVISION"] != "wired-00001" {
		t.Errorf("GET %s: %s, env %v (%v)", host, resp.Status, info.Env, err)
	}

	// The log subresource and the image endpoints, with the admin token.
	api := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	token, err := os.ReadFile(filepath.Join(cfg.DataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, a.api+path, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := api.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	eventually(t, 30*time.Second, "the instance's output in the log", func() error {
		if code, body := call(http.MethodGet, "/apis/serving.knative.dev/v1/namespaces/default/revisions/wired-00001/log"); code != 200 || !strings.Contains(body, "listening") {
			return fmt.Errorf("%d %q", code, body)
		}
		return nil
	})
	if code, body := call(http.MethodGet, "/knbox/v1/images"); code != 200 || !strings.Contains(body, "sha256:") {
		t.Errorf("images: %d %s", code, body)
	}
	if code, body := call(http.MethodPost, "/knbox/v1/images/prune"); code != 200 || !strings.Contains(body, `"freedBytes":0`) {
		t.Errorf("prune with the image in use: %d %s", code, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of its context's end")
	}
	if ents, err := os.ReadDir(filepath.Join(cfg.DataDir, "instances", "instances")); err != nil || len(ents) != 0 {
		t.Errorf("instances left after Run returned: %v (%v)", ents, err)
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
