package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// contractRuntimeClasses are the RuntimeClasses every contract check runs
// under.
var contractRuntimeClasses = []string{"runc", "runsc"}

// The Secret and ConfigMap the contract services read, in env and volumes.
const (
	contractSecret    = "contract-secret"
	contractConfigMap = "contract-config"
)

var (
	contractSecretData    = map[string]string{"user": "alice", "token": "s3cr3t-token"}
	contractConfigMapData = map[string]string{"greeting": "hello", "color": "blue"}
)

// contractEnv is one knbox serve with the contract's images in a loopback
// registry and the Secret and ConfigMap they read. Its methods take the
// calling (sub)test's t, so parallel subtests may share it.
type contractEnv struct {
	k       *kubectlEnv
	infoRef string // runtime-info, no USER
	userRef string // runtime-info with USER 65532
	toolRef string // runtime-info at /app plus busybox (sh, cat, ...)
	client  *http.Client
	urls    sync.Map // service name -> status.url
}

// newContractEnv starts knbox serve (with serveArgs), waits for the runc
// and runsc RuntimeClasses, pushes the images and creates the Secret and
// ConfigMap.
func newContractEnv(t *testing.T, serveArgs ...string) *contractEnv {
	t.Helper()
	requireTool(t, "runc")
	requireTool(t, "runsc")
	k := newKubectl(t, serveArgs...)
	e := &contractEnv{k: k}
	e.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, k.srv.httpAddr)
		},
		DisableKeepAlives: true,
	}}

	reg := imagetest.StartRegistry(t)
	bin := imagetest.BuildGo(t, "github.com/knbox/knbox/test/images/runtime-info")
	app := imagetest.File{Path: "app", Mode: 0o755, Body: bin}
	entry := []string{"/app"}
	e.infoRef = imagetest.PushImage(t, reg, "runtime-info:contract", image.Config{Entrypoint: entry}, append(imagetest.BaseFiles(), app))
	e.userRef = imagetest.PushImage(t, reg, "runtime-info:contract-user", image.Config{Entrypoint: entry, User: "65532"}, append(imagetest.BaseFiles(), app))
	e.toolRef = imagetest.PushImage(t, reg, "toolbox:contract", image.Config{Entrypoint: entry}, append(imagetest.BusyboxFiles(t), app))

	e.waitRuntimeClasses(t, contractRuntimeClasses...)
	secretArgs := []string{"create", "secret", "generic", contractSecret}
	for k, v := range contractSecretData {
		secretArgs = append(secretArgs, "--from-literal="+k+"="+v)
	}
	e.kubectl(t, "", secretArgs...)
	cmArgs := []string{"create", "configmap", contractConfigMap}
	for k, v := range contractConfigMapData {
		cmArgs = append(cmArgs, "--from-literal="+k+"="+v)
	}
	e.kubectl(t, "", cmArgs...)
	return e
}

// kubectlRun runs kubectl against the env's server.
func (e *contractEnv) kubectlRun(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	return run(t, e.k.env, stdin, e.k.bin, args...)
}

// kubectl runs kubectl and fails t if it fails.
func (e *contractEnv) kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := e.kubectlRun(t, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// knboxLogs runs the built `knbox logs` against the env's server.
func (e *contractEnv) knboxLogs(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, []string{"KNBOX_DATA_DIR=" + e.k.srv.dir, "KUBECONFIG="}, "", knboxBin, append([]string{"logs"}, args...)...)
}

func (e *contractEnv) waitRuntimeClasses(t *testing.T, names ...string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		missing := ""
		for _, n := range names {
			if _, err := e.kubectlRun(t, "", "get", "runtimeclass", n); err != nil {
				missing = n
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("RuntimeClass %s not registered after 90s:\n%s", missing, e.k.srv.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// contractService is a Service of one container under runtime class rc,
// named name-rc.
func contractService(name, rc string, c corev1.Container, volumes ...corev1.Volume) *servingv1.Service {
	return &servingv1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "serving.knative.dev/v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + rc},
		Spec: servingv1.ServiceSpec{ConfigurationSpec: servingv1.ConfigurationSpec{Template: servingv1.RevisionTemplateSpec{
			Spec: servingv1.RevisionSpec{PodSpec: corev1.PodSpec{
				RuntimeClassName: &rc,
				Containers:       []corev1.Container{c},
				Volumes:          volumes,
			}},
		}}},
	}
}

// contractManifest is svc as JSON for kubectl apply, without its empty status.
func contractManifest(t *testing.T, svc *servingv1.Service) string {
	t.Helper()
	b, err := json.Marshal(svc)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "status")
	b, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// apply applies svc with kubectl and fails t if kubectl refuses it.
func (e *contractEnv) apply(t *testing.T, svc *servingv1.Service) {
	t.Helper()
	e.kubectl(t, contractManifest(t, svc), "apply", "-f", "-")
}

// waitReady waits (kubectl wait, up to 4 minutes) for the Service's Ready
// condition, and fails t with the Service's and its Revisions' state if it
// does not come.
func (e *contractEnv) waitReady(t *testing.T, svc string) {
	t.Helper()
	e.waitFor(t, "ksvc/"+svc, "condition=Ready", 4*time.Minute)
}

// waitFor runs `kubectl wait --for=cond` on obj until it succeeds or
// timeout passes (kubectl runs at most 60s at a time).
func (e *contractEnv) waitFor(t *testing.T, obj, cond string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := e.kubectlRun(t, "", "wait", obj, "--for="+cond, "--timeout=50s")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			state, _ := e.kubectlRun(t, "", "get", "ksvc,rev", "-o", "yaml")
			t.Fatalf("%s: no %s after %v: %v\n%s\n%s", obj, cond, timeout, err, out, state)
		}
		time.Sleep(time.Second)
	}
}

// url is the Service's status.url.
func (e *contractEnv) url(t *testing.T, svc string) string {
	t.Helper()
	if u, ok := e.urls.Load(svc); ok {
		return u.(string)
	}
	u := e.kubectl(t, "", "get", "ksvc", svc, "-o", "jsonpath={.status.url}")
	if !strings.HasPrefix(u, "http://") {
		t.Fatalf("ksvc %s: status.url %q", svc, u)
	}
	e.urls.Store(svc, u)
	return u
}

// get sends GET pathQuery to the Service through knbox's router (dialing
// its loopback address, with the Host of the Service's URL).
func (e *contractEnv) get(t *testing.T, svc, pathQuery string, timeout time.Duration) (int, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.url(t, svc)+pathQuery, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, body, err
}

// mustGet is get that fails t unless the answer is 200.
func (e *contractEnv) mustGet(t *testing.T, svc, pathQuery string) []byte {
	t.Helper()
	code, body, err := e.get(t, svc, pathQuery, 60*time.Second)
	if err != nil || code != 200 {
		t.Fatalf("GET %s%s: %d %v\n%s", svc, pathQuery, code, err, body)
	}
	return body
}

// ctInfo is the part of runtime-info's answer (test/images/runtime-info)
// the contract tests read.
type ctInfo struct {
	Env         map[string]string `json:"env"`
	Args        []string          `json:"args"`
	PID         int               `json:"pid"`
	UID         int               `json:"uid"`
	GID         int               `json:"gid"`
	EUID        int               `json:"euid"`
	EGID        int               `json:"egid"`
	Groups      []int             `json:"groups"`
	Cwd         string            `json:"cwd"`
	Hostname    string            `json:"hostname"`
	StdinEOF    bool              `json:"stdinEOF"`
	StdinDetail string            `json:"stdinDetail"`
	Started     time.Time         `json:"started"`
	Files       []ctFile          `json:"files"`
	Mounts      []ctMount         `json:"mounts"`
	Cgroup      ctCgroup          `json:"cgroup"`

	raw []byte
}

type ctFile struct {
	Path     string `json:"path"`
	Exists   bool   `json:"exists"`
	Mode     string `json:"mode"`
	Perm     string `json:"perm"`
	Type     string `json:"type"`
	Size     int64  `json:"size"`
	UID      int    `json:"uid"`
	GID      int    `json:"gid"`
	Link     string `json:"link"`
	Writable bool   `json:"writable"`
	Error    string `json:"error"`
}

func (f ctFile) String() string {
	b, _ := json.Marshal(f)
	return string(b)
}

type ctMount struct {
	MountPoint   string `json:"mountPoint"`
	FSType       string `json:"fsType"`
	Source       string `json:"source"`
	Options      string `json:"options"`
	SuperOptions string `json:"superOptions"`
}

type ctCgroup struct {
	Version     int            `json:"version"`
	Path        string         `json:"path"`
	MemoryLimit *int64         `json:"memoryLimit"`
	CPUQuota    *int64         `json:"cpuQuota"`
	CPUPeriod   int64          `json:"cpuPeriod"`
	CPUShares   int64          `json:"cpuShares"`
	CPUWeight   int64          `json:"cpuWeight"`
	Files       []ctCgroupFile `json:"files"`
}

type ctCgroupFile struct {
	Path     string `json:"path"`
	Value    string `json:"value"`
	Writable bool   `json:"writable"`
	Error    string `json:"error"`
}

// info asks the Service's runtime-info what it sees, with extra paths to
// report.
func (e *contractEnv) info(t *testing.T, svc string, paths ...string) *ctInfo {
	t.Helper()
	q := ""
	for i, p := range paths {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		q += sep + "path=" + url.QueryEscape(p)
	}
	body := e.mustGet(t, svc, "/"+q)
	info := &ctInfo{raw: body}
	if err := json.Unmarshal(body, info); err != nil {
		t.Fatalf("runtime-info of %s: %v\n%s", svc, err, body)
	}
	return info
}

// file is what runtime-info reported of path.
func (i *ctInfo) file(t *testing.T, path string) ctFile {
	t.Helper()
	for _, f := range i.Files {
		if f.Path == path {
			return f
		}
	}
	t.Fatalf("runtime-info did not report %s", path)
	return ctFile{}
}

// mount is the last (topmost) mount at mountPoint, if any.
func (i *ctInfo) mount(mountPoint string) (ctMount, bool) {
	var m ctMount
	found := false
	for _, x := range i.Mounts {
		if x.MountPoint == mountPoint {
			m, found = x, true
		}
	}
	return m, found
}

func (m ctMount) readOnly() bool {
	return ctHasOption(m.Options, "ro")
}

func ctHasOption(opts, o string) bool {
	for _, x := range strings.Split(opts, ",") {
		if x == o {
			return true
		}
	}
	return false
}

// mountsString lists the mounts for failure messages.
func (i *ctInfo) mountsString() string {
	var b strings.Builder
	for _, m := range i.Mounts {
		fmt.Fprintf(&b, "  %s %s %s %s %s\n", m.MountPoint, m.FSType, m.Source, m.Options, m.SuperOptions)
	}
	return b.String()
}

// waitRestart polls the Service's runtime-info until it reports a process
// started after before's (the container was restarted), or timeout.
func (e *contractEnv) waitRestart(t *testing.T, svc string, before time.Time, timeout time.Duration) (*ctInfo, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		code, body, err := e.get(t, svc, "/", 15*time.Second)
		if err == nil && code == 200 {
			info := &ctInfo{raw: body}
			if json.Unmarshal(body, info) == nil && !info.Started.Equal(before) {
				return info, true
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return nil, false
}

// ctCondition is one of a Knative object's status conditions.
type ctCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (c ctCondition) String() string {
	return fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message)
}

// conditions returns the status conditions of obj ("rev/NAME").
func (e *contractEnv) conditions(t *testing.T, obj string) []ctCondition {
	t.Helper()
	out, err := e.kubectlRun(t, "", "get", obj, "-o", "json")
	if err != nil {
		t.Logf("kubectl get %s: %v\n%s", obj, err, out)
		return nil
	}
	var o struct {
		Status struct {
			Conditions []ctCondition `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("kubectl get %s -o json: %v\n%s", obj, err, out)
	}
	return o.Status.Conditions
}

func ctConditionsString(cs []ctCondition) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.String())
	}
	return strings.Join(s, "; ")
}

// ctProcStatus finds "Name:\tvalue" lines of /proc/self/status in text.
func ctProcStatus(text string) map[string]string {
	out := map[string]string{}
	re := regexp.MustCompile(`(?m)^(NoNewPrivs|Seccomp|CapInh|CapPrm|CapEff|CapBnd|CapAmb|Uid|Gid):\s+(.*)$`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		out[m[1]] = strings.TrimSpace(m[2])
	}
	return out
}

// ctConfigFile writes a knbox config file into a temporary directory.
func ctConfigFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "knbox.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
