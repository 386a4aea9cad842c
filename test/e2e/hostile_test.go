package e2e

// The hostile-input suite end to end: images made to hurt the host, pushed
// to a loopback registry and named by Services, and hostile API requests,
// against one knbox serve. Each is refused with its reason (on the
// Revision, or in the 4xx), nothing is written outside the data dir, the
// memory and the disk stay bounded, and knbox still serves. The figures go
// to the log:
//
//	go test -race -count=1 -p 1 ./test/e2e/ -run TestHostileInputs -v
//
// KNBOX_HOSTILE_UPDATES sets the number of 900 KiB ConfigMap updates (100 by
// default; the campaign's finding was 600).

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
	"github.com/knbox/knbox/pkg/pki"
)

// hostileConfig scales the limits down where the defaults would make the
// suite slow (timeouts of seconds, not minutes; 64 MiB layers rather than
// 4 GiB), and keeps the others.
const hostileConfig = `limits:
  api:
    readHeaderTimeout: 2s
    idleTimeout: 2s
    maxConnections: 200
  router:
    readHeaderTimeout: 2s
    idleTimeout: 2s
    maxConnections: 200
  images:
    maxLayerBytes: 64Mi
    maxImageBytes: 96Mi
    maxLayerFiles: 5000
    maxImageFiles: 8000
  ephemeralStorage:
    interval: 1s
    defaultContainerLimit: 32Mi
    maxFiles: 20000
`

// procStatus reads a field of /proc/PID/status, in KiB.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// diskUsage is the disk blocks used under dir, in bytes.
func diskUsage(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			}
		}
		return nil
	})
	return total
}

// apiClient talks to knbox's API with the admin token.
type apiClient struct {
	url   string
	token string
	http  *http.Client
}

func newAPIClient(t *testing.T, s *server) *apiClient {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(s.dir, pki.CACertName))
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(filepath.Join(s.dir, pki.TokenName))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &apiClient{url: "https://" + s.apiAddr, token: strings.TrimSpace(string(token)),
		http: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
}

func (c *apiClient) do(t *testing.T, method, path, ctype string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, c.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// revisionMessages are the condition messages of the revisions of a
// Service.
func revisionMessages(t *testing.T, k *kubectlEnv, svc string) string {
	t.Helper()
	out, err := k.run("", "get", "rev", "-l", "serving.knative.dev/service="+svc, "-o", "json")
	if err != nil {
		return ""
	}
	var list struct {
		Items []struct {
			Status struct {
				Conditions []struct{ Type, Status, Reason, Message string }
			}
		}
	}
	if json.Unmarshal([]byte(out), &list) != nil {
		return ""
	}
	var b strings.Builder
	for _, r := range list.Items {
		for _, c := range r.Status.Conditions {
			fmt.Fprintf(&b, "%s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return b.String()
}

func TestHostileInputs(t *testing.T) {
	requireTool(t, "runc")
	cfg := filepath.Join(t.TempDir(), "knbox.yaml")
	if err := os.WriteFile(cfg, []byte(hostileConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	k := newKubectl(t, "--config", cfg)
	srv := k.srv
	pid := srv.cmd.Process.Pid
	api := newAPIClient(t, srv)
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	var peakDisk int64
	sample := func() { peakDisk = max(peakDisk, diskUsage(srv.dir)) }
	cases := 0
	baseRSS := procStatus(t, pid, "VmRSS")

	t.Run("images", func(t *testing.T) {
		overrides := &imagetest.BlobOverrides{}
		reg := imagetest.StartRegistryWith(t, overrides.Wrap)
		file := func(p, body string) imagetest.File { return imagetest.File{Path: p, Body: []byte(body)} }
		var many []imagetest.File
		for i := range 6000 {
			many = append(many, file(fmt.Sprintf("f%d", i), ""))
		}
		badDigest := imagetest.PushImage(t, reg, "hostile/digest:1", image.Config{}, []imagetest.File{file("a", strings.Repeat("a", 4096))})
		d := imagetest.FirstLayer(t, badDigest)
		overrides.Serve(d.Digest.String(), bytes.Repeat([]byte{0x1f}, int(d.Size)), false)
		images := []struct{ name, ref, want string }{
			{"sparse", imagetest.PushImage(t, reg, "hostile/sparse:1", image.Config{},
				[]imagetest.File{{Path: "big", SparseSize: 5 << 30, Body: []byte("end")}}), "sparse files count their full length"},
			{"gzip-bomb", imagetest.PushRaw(t, reg, "hostile/bomb:1", image.Config{},
				append(imagetest.Layer(t, file("x", "x")), make([]byte, 80<<20)...)), "the uncompressed layer is larger than 64.0 MiB"},
			{"bad-digest", badDigest, "failed verification"},
			{"traversal", imagetest.PushImage(t, reg, "hostile/dotdot:1", image.Config{},
				[]imagetest.File{file("../../../../../../"+strings.TrimPrefix(outside, "/")+"/x", "x")}), "path escapes the layer"},
			{"symlink", imagetest.PushImage(t, reg, "hostile/symlink:1", image.Config{},
				[]imagetest.File{{Path: "evil", Type: tar.TypeSymlink, Link: outside}, file("evil/pwned", "x")}), "parent directory is a symlink"},
			{"many-files", imagetest.PushImage(t, reg, "hostile/files:1", image.Config{}, many), "more than 5000 files in the layer"},
			{"huge-config", imagetest.PushImage(t, reg, "hostile/config:1", image.Config{Env: []string{"X=" + strings.Repeat("x", 9<<20)}},
				[]imagetest.File{file("a", "a")}), "limits.images.maxConfigBytes"},
		}
		for _, img := range images {
			k.must(fmt.Sprintf("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: %s\nspec:\n  template:\n    spec:\n      containers:\n      - image: %s\n", img.name, img.ref), "apply", "-f", "-")
		}
		for _, img := range images {
			cases++
			deadline := time.Now().Add(2 * time.Minute)
			for msgs := revisionMessages(t, k, img.name); !strings.Contains(msgs, img.want); msgs = revisionMessages(t, k, img.name) {
				if time.Now().After(deadline) {
					t.Errorf("%s: the Revision does not say %q:\n%s", img.name, img.want, msgs)
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
			sample()
		}
		if n := overrides.Gets(d.Digest.String()); n > 2 {
			t.Errorf("the blob with a bad digest was fetched %d times", n)
		}
	})

	t.Run("api", func(t *testing.T) {
		cm := "/api/v1/namespaces/default/configmaps"
		if code, body := api.do(t, "POST", cm, "application/json", []byte(`{"metadata":{"name":"bomb"},"data":{"a":"`+strings.Repeat("x", 1024)+`"}}`)); code != 201 {
			t.Fatalf("create: %d %s", code, body)
		}
		var ops []string
		for i := range 12 {
			ops = append(ops, fmt.Sprintf(`{"op":"copy","from":"/data","path":"/metadata/annotations/k%d"}`, i),
				fmt.Sprintf(`{"op":"copy","from":"/metadata/annotations","path":"/data/d%d"}`, i))
		}
		patchBomb := "[" + `{"op":"add","path":"/metadata/annotations","value":{}},` + strings.Join(ops, ",") + "]"
		labels := make([]string, 0, 160000)
		for i := range 160000 {
			labels = append(labels, fmt.Sprintf(`"l%d":"v"`, i))
		}
		requests := []struct {
			name, method, path, ctype, body string
			code                            int
			want                            string
		}{
			{"patch bomb", "PATCH", cm + "/bomb", "application/json-patch+json", patchBomb, 413, "copy operations add more than"},
			{"deep nesting", "POST", cm, "application/json", `{"metadata":{"name":"deep","labels":` + strings.Repeat("[", 200000) + strings.Repeat("]", 200000) + `}}`, 400, ""},
			{"huge label map", "POST", cm, "application/json", `{"metadata":{"name":"labels","labels":{` + strings.Join(labels, ",") + `}}}`, 413, "the limit for configmaps is 1572864 bytes"},
			{"huge annotations", "POST", cm, "application/json", `{"metadata":{"name":"ann","annotations":{"a":"` + strings.Repeat("x", 300<<10) + `"}}}`, 422, "metadata.annotations"},
			{"huge body", "POST", cm, "application/json", `{"metadata":{"name":"body"},"data":{"a":"` + strings.Repeat("x", 4<<20) + `"}}`, 413, "limit is"},
		}
		for _, r := range requests {
			cases++
			code, body := api.do(t, r.method, r.path, r.ctype, []byte(r.body))
			if code != r.code || !strings.Contains(body, r.want) || !strings.Contains(body, `"kind":"Status"`) {
				t.Errorf("%s: %d %.300s; want %d with %q", r.name, code, body, r.code, r.want)
			}
			sample()
		}
	})

	t.Run("connections", func(t *testing.T) {
		// Many connections that send nothing, to both listeners: over the
		// limit they are closed at once, the others after the header
		// timeout (the TLS handshake's, on the API); slowloris too.
		cases += 3
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for _, addr := range []string{srv.apiAddr, srv.httpAddr} {
			for range 300 {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
			}
		}
		slow, err := net.Dial("tcp", srv.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, slow)
		fmt.Fprintf(slow, "GET / HTTP/1.1\r\nHost: x\r\n")
		go func() {
			for range 100 {
				if _, err := slow.Write([]byte("X")); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		var wg sync.WaitGroup
		var mu sync.Mutex
		open := 0
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				if _, err := bufio.NewReader(c).ReadByte(); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						mu.Lock()
						open++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if open > 0 {
			t.Errorf("%d of %d idle or slow connections still open after 20s", open, len(conns))
		}
		// Keep-alive connections left idle after a request are closed too.
		var idle []net.Conn
		for range 50 {
			c, err := net.Dial("tcp", srv.httpAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: nothing.default.localhost\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			idle = append(idle, c)
		}
		for _, c := range idle {
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Error("an idle keep-alive connection got data")
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Error("an idle keep-alive connection is still open after 20s")
				break
			}
		}
		sample()
	})

	t.Run("store", func(t *testing.T) {
		updates := 100
		if n, err := strconv.Atoi(os.Getenv("KNBOX_HOSTILE_UPDATES")); err == nil && n > 0 {
			updates = n
		}
		cases++
		path := "/api/v1/namespaces/default/configmaps"
		before := procStatus(t, pid, "VmRSS")
		value := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), 900<<10) }
		if code, body := api.do(t, "POST", path, "application/json", []byte(`{"metadata":{"name":"big"},"data":{"v":"`+value(0)+`"}}`)); code != 201 {
			t.Fatalf("create: %d %.300s", code, body)
		}
		for i := 1; i <= updates; i++ {
			if code, body := api.do(t, "PATCH", path+"/big", "application/merge-patch+json", []byte(`{"data":{"v":"`+value(i)+`"}}`)); code != 200 {
				t.Fatalf("update %d: %d %.300s", i, code, body)
			}
		}
		sample()
		grown := procStatus(t, pid, "VmRSS") - before
		fi, err := os.Stat(filepath.Join(srv.dir, "knbox.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d updates of a 900 KiB ConfigMap: RSS %+d MiB, knbox.db %d MiB", updates, grown>>10, fi.Size()>>20)
		if fi.Size() > 256<<20 {
			t.Errorf("knbox.db is %d MiB after %d updates of 900 KiB", fi.Size()>>20, updates)
		}
		if grown > 512<<10 {
			t.Errorf("RSS grew by %d MiB over %d updates of 900 KiB", grown>>10, updates)
		}
	})

	t.Run("containers", func(t *testing.T) {
		// Containers that write to the data dir's disk: each is evicted (or
		// its write fails) with the reason on the Revision. They end on
		// SIGTERM so that knbox serve stops them within the harness's 10s.
		reg := imagetest.StartRegistry(t)
		ref := imagetest.PushImage(t, reg, "hostile/sh:1", image.Config{}, imagetest.BusyboxFiles(t))
		sizeLimit := resource.MustParse("8Mi")
		scratch := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &sizeLimit}}}
		start := diskUsage(srv.dir)
		var peak int64 // of the data dir while these run
		csample := func() {
			sample()
			peak = max(peak, diskUsage(srv.dir))
		}
		sh := func(script string) []string { return []string{"/bin/sh", "-c", "trap 'exit 0' TERM; " + script} }
		ctrs := []struct {
			name string
			c    corev1.Container
			vols []corev1.Volume
			want string
		}{
			{"fill-layer", corev1.Container{Command: sh("dd if=/dev/zero of=/big bs=1M count=128; sleep 3600 & wait")}, nil,
				"Pod ephemeral local storage usage exceeds the total limit of containers 32Mi."},
			{"fill-emptydir", corev1.Container{Command: sh("dd if=/dev/zero of=/scratch/big bs=1M count=64; sleep 3600 & wait"),
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}, []corev1.Volume{scratch},
				`Usage of EmptyDir volume "scratch" exceeds the limit "8Mi".`},
			{"inode-bomb", corev1.Container{Command: sh("mkdir /m && cd /m && i=0; while [ $i -lt 25000 ]; do : > f$i; i=$((i+1)); done; sleep 3600 & wait")}, nil,
				"holds more than 20000 files"},
			{"fill-termination-log", corev1.Container{Command: sh("dd if=/dev/zero of=/dev/termination-log bs=1M count=100; echo \"dd $?\" > /dev/termination-log; exit 3")}, nil,
				"Container failed with: dd 1"},
		}
		for _, c := range ctrs {
			c.c.Image = ref
			k.must(contractManifest(t, contractService(c.name, "runc", c.c, c.vols...)), "apply", "-f", "-")
		}
		for _, c := range ctrs {
			cases++
			svc := c.name + "-runc"
			deadline := time.Now().Add(2 * time.Minute)
			for msgs := revisionMessages(t, k, svc); !strings.Contains(msgs, c.want); msgs = revisionMessages(t, k, svc) {
				if time.Now().After(deadline) {
					t.Errorf("%s: the Revision does not say %q:\n%s", c.name, c.want, msgs)
					break
				}
				csample()
				time.Sleep(250 * time.Millisecond)
			}
			csample()
		}
		for _, c := range ctrs {
			k.must("", "delete", "ksvc", c.name+"-runc")
		}
		t.Logf("%d containers writing 128 MiB, 64 MiB, 25000 files and 100 MiB past their limits (32Mi, 8Mi, 20000 files, 4 KiB): the data dir went from %d MiB to a peak of %d MiB", len(ctrs), start>>20, peak>>20)
	})

	t.Run("still serving", func(t *testing.T) {
		reg := imagetest.StartRegistry(t)
		bin := imagetest.BuildGo(t, "github.com/knbox/knbox/test/images/runtime-info")
		ref := imagetest.PushImage(t, reg, "good:1", image.Config{Entrypoint: []string{"/app"}},
			append(imagetest.BaseFiles(), imagetest.File{Path: "app", Mode: 0o755, Body: bin}))
		k.must(fmt.Sprintf("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: good\nspec:\n  template:\n    spec:\n      containers:\n      - image: %s\n", ref), "apply", "-f", "-")
		if out, err := k.run("", "wait", "ksvc/good", "--for=condition=Ready", "--timeout=120s"); err != nil {
			t.Fatalf("a good Service after the hostile inputs: %v\n%s\n%s", err, out, revisionMessages(t, k, "good"))
		}
		req, _ := http.NewRequest("GET", "http://"+srv.httpAddr+"/", nil)
		req.Host = "good.default.localhost"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET through the router: %d", resp.StatusCode)
		}
		if code, _ := api.do(t, "GET", "/readyz", "", nil); code != 200 {
			t.Errorf("/readyz: %d", code)
		}
		sample()
	})

	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("written outside the data dir: %v", ents)
	}
	peakRSS := procStatus(t, pid, "VmHWM")
	t.Logf("hostile inputs: %d cases; knbox's peak RSS %d MiB (%d MiB at the start); the data dir peaked at %d MiB (64 MiB of it the store's reserve)",
		cases, peakRSS>>10, baseRSS>>10, peakDisk>>20)
	if peakRSS > 1<<20 {
		t.Errorf("knbox's peak RSS %d MiB", peakRSS>>10)
	}
	if peakDisk > 1<<30 {
		t.Errorf("the data dir peaked at %d MiB", peakDisk>>20)
	}
}

// TestDataDirIsPrivate is the finding: a data dir that existed with mode
// 0755 stayed so, and any local user could read Secret volume files. knbox
// serve makes it 0700.
func TestDataDirIsPrivate(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	startServer(t, dir, "")
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %v after knbox serve started, want 0700", fi.Mode().Perm())
	}
}
