package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sys/unix"

	"github.com/knbox/knbox/pkg/config"
	"github.com/knbox/knbox/pkg/network"
)

// handRunner starts copies of a running knbox instance's own OCI bundle by
// hand, with the runtime's CLI (`runc run --detach`), each in a network
// namespace of its own: the anchor a cold start through knbox is compared
// with. The copies share the instance's root filesystem and the files it
// has bind-mounted (they only read them), so the instance must stay up
// while they run; a minimum scale of 1 keeps it.
type handRunner struct {
	bin    string // the runtime's binary
	args   []string
	root   string // the runtime's state root, ours alone
	nsRoot string
	dir    string
	spec   map[string]any // the instance's config.json
	port   string
	seq    int
}

// newHandRunner reads the bundle of the one instance of revision rev.
func (e *env) newHandRunner(rt, rev string) (*handRunner, error) {
	bin, err := exec.LookPath(rt)
	if err != nil {
		return nil, err
	}
	all, err := filepath.Glob(filepath.Join(e.dir, "data", "instances", "instances", rev+"-*", "config.json"))
	var matches []string
	for _, m := range all {
		// Not the revision's prepared sandbox: its instance's.
		if _, serr := os.Stat(filepath.Join(filepath.Dir(m), "prepared")); serr != nil {
			matches = append(matches, m)
		}
	}
	if err != nil || len(matches) != 1 {
		return nil, fmt.Errorf("bundle of %s: %d found (%v)", rev, len(matches), err)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(e.dir, "hand"), 0o700); err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp(filepath.Join(e.dir, "hand"), rt+"-")
	if err != nil {
		return nil, err
	}
	h := &handRunner{bin: bin, root: filepath.Join(base, "root"), nsRoot: filepath.Join(base, "netns"),
		dir: filepath.Join(base, "bundles"), port: "8080"}
	// The global flags knbox's handler passes (the default config, which
	// the bench's knbox serve runs with): runsc's --host-uds=open, ...
	if r, ok := config.Default().Runtimes[rt]; ok {
		h.args = r.Args
	}
	if err := json.Unmarshal(b, &h.spec); err != nil {
		return nil, err
	}
	root, _ := h.spec["root"].(map[string]any)
	if root == nil || root["path"] == nil {
		return nil, errors.New("bundle without root.path")
	}
	if p, _ := root["path"].(string); !filepath.IsAbs(p) {
		root["path"] = filepath.Join(filepath.Dir(matches[0]), p)
	}
	if proc, _ := h.spec["process"].(map[string]any); proc != nil {
		env, _ := proc["env"].([]any)
		for _, v := range env {
			if s, _ := v.(string); strings.HasPrefix(s, "PORT=") {
				h.port = strings.TrimPrefix(s, "PORT=")
			}
		}
	}
	for _, d := range []string{h.root, h.nsRoot, h.dir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// close undoes the mount that the namespaces' directory became (package
// network makes it a shared mount point).
func (h *handRunner) close() {
	if err := unix.Unmount(h.nsRoot, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
		logf("hand: unmount %s: %v", h.nsRoot, err)
	}
}

// handInstance is one container started by hand.
type handInstance struct {
	h      *handRunner
	id     string
	ns     *network.NS
	bundle string
}

// prepare makes a namespace and a bundle for the next container (not
// timed: knbox's cold start is compared with the runtime's own start).
func (h *handRunner) prepare() (*handInstance, error) {
	h.seq++
	id := fmt.Sprintf("hand-%d-%d", os.Getpid(), h.seq)
	ns, err := network.CreateIn(h.nsRoot, id)
	if err != nil {
		return nil, err
	}
	in := &handInstance{h: h, id: id, ns: ns, bundle: filepath.Join(h.dir, id)}
	spec := cloneJSON(h.spec)
	linux, _ := spec["linux"].(map[string]any)
	if linux == nil {
		_ = ns.Delete()
		return nil, errors.New("bundle without linux")
	}
	linux["cgroupsPath"] = "/knbox/" + id // beside knbox's own
	nss, _ := linux["namespaces"].([]any)
	for _, n := range nss {
		if m, _ := n.(map[string]any); m != nil && m["type"] == "network" {
			m["path"] = ns.Path
		}
	}
	b, err := json.Marshal(spec)
	if err == nil {
		err = os.MkdirAll(in.bundle, 0o700)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(in.bundle, "config.json"), b, 0o600)
	}
	if err != nil {
		in.remove()
		return nil, err
	}
	return in, nil
}

func cloneJSON(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

func (h *handRunner) cmd(ctx context.Context, args ...string) *exec.Cmd {
	all := append([]string{"--root", h.root}, h.args...)
	return exec.CommandContext(ctx, h.bin, append(all, args...)...)
}

// start runs the container detached (`run --detach`: the runtime returns once
// the process runs) and returns once a request has its first byte.
// reqPath is what is asked for.
func (in *handInstance) start(ctx context.Context, reqPath string) error {
	// The container inherits the runtime's output: a file, so that
	// nothing waits for it to close.
	logPath := filepath.Join(in.bundle, "output")
	out, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := in.h.cmd(ctx, "run", "--detach", "--bundle", in.bundle, in.id)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("%s run: %v: %s", filepath.Base(in.h.bin), err, b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Poll the port every millisecond, as the host-process baseline.
		c, err := in.ns.Dial(ctx, "tcp", "127.0.0.1:"+in.h.port)
		if err == nil {
			return firstByte(ctx, c, reqPath)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not listen: %v", in.id, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// firstByte sends GET reqPath on c, waits for the answer's first byte and
// reads the rest.
func firstByte(ctx context.Context, c net.Conn, reqPath string) error {
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, "GET "+reqPath+" HTTP/1.1\r\nHost: hand\r\nConnection: close\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// remove kills and deletes the container, its namespace and bundle.
func (in *handInstance) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = in.h.cmd(ctx, "delete", "--force", in.id).Run()
	if in.ns != nil {
		if err := in.ns.Delete(); err != nil {
			logf("hand: delete netns %s: %v", in.id, err)
		}
	}
	_ = os.RemoveAll(in.bundle)
}

// handCold measures n starts by hand of the anchor instance's bundle,
// one at a time: `run --detach` -> first byte of GET path.
func (h *handRunner) once(ctx context.Context) (time.Duration, error) {
	in, err := h.prepare()
	if err != nil {
		return 0, err
	}
	defer in.remove()
	start := time.Now()
	if err := in.start(ctx, path); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// parallel starts n copies at once, each asked reqPath as soon as it
// listens, and returns when every answer is complete.
func (h *handRunner) parallel(ctx context.Context, n int, reqPath string) (time.Duration, error) {
	ins := make([]*handInstance, 0, n)
	defer func() {
		for _, in := range ins {
			in.remove()
		}
	}()
	for range n {
		in, err := h.prepare()
		if err != nil {
			return 0, err
		}
		ins = append(ins, in)
	}
	start := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = in.start(ctx, reqPath)
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// anchorService creates a Service that keeps one instance of runtime rt
// (min-scale 1), whose bundle the runs by hand copy, and returns its
// revision once ready. stop deletes it and waits until its instance is
// gone (instances outlive knbox serve: one left would stay).
func (e *env) anchorService(ctx context.Context, table, rt string) (rev string, stop func(), err error) {
	// A name per table: a name used again just after its Service was
	// deleted would wait for the old revision's removal.
	name := "anchor-" + table + "-" + rt
	if err := e.createService(ctx, name, rt, map[string]string{"autoscaling.knative.dev/min-scale": "1"}); err != nil {
		return "", nil, err
	}
	_, revs, err := e.waitReady(ctx, []string{name})
	stop = func() {
		if err := e.deleteAndWait(context.WithoutCancel(ctx), map[string]string{name: revs[name]}); err != nil {
			logf("anchor %s: %v", rt, err)
		}
	}
	if err != nil {
		stop()
		return "", nil, err
	}
	return revs[name], stop, nil
}

// deleteAndWait deletes Services (name -> revision) and waits until their
// revisions are gone, with their instances.
func (e *env) deleteAndWait(ctx context.Context, svcs map[string]string) error {
	for n := range svcs {
		if err := e.serving.ServingV1().Services(namespace).Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return poll(ctx, 3*time.Minute, 250*time.Millisecond, "services removed", func() (bool, error) {
		reps, err := e.replicas(ctx)
		if err != nil {
			return false, err
		}
		for _, rev := range svcs {
			if _, ok := reps[rev]; ok && rev != "" {
				return false, nil
			}
		}
		// Their instances and prepared sandboxes stop in the
		// background: gone once their directories are.
		ents, _ := os.ReadDir(filepath.Join(e.dir, "data", "instances", "instances"))
		for _, en := range ents {
			for _, rev := range svcs {
				if rev != "" && strings.HasPrefix(en.Name(), rev+"-") {
					return false, nil
				}
			}
		}
		return true, nil
	})
}
