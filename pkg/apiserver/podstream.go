package apiserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/kubelet/pkg/cri/streaming/portforward"
	kuberemotecommand "k8s.io/kubelet/pkg/cri/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// Bounds of pods/exec's command and port-forward's ports: sanity checks of
// kube-apiserver's kind (the query is bounded already by the listener's
// header size limit, which it is part of).
const (
	maxExecArgs      = 4096
	maxExecArgsBytes = 256 << 10
	maxForwardPorts  = 64
)

// ExecOptions are pods/exec's query parameters, checked.
type ExecOptions struct {
	Container             string
	Command               []string
	Stdin, Stdout, Stderr bool
	TTY                   bool
}

// parseExecOptions reads pods/exec's query as kube-apiserver does
// (PodExecOptions and its validation). A TTY is refused: the runtime
// handlers run exec without a console.
func parseExecOptions(q url.Values) (ExecOptions, error) {
	var o ExecOptions
	bad := func(field, v, why string) error {
		if len(v) > 64 {
			v = v[:64] + "..."
		}
		return apierrors.NewBadRequest(fmt.Sprintf("%s: invalid value %q: %s", field, v, why))
	}
	for k, vs := range q {
		if k != "command" && len(vs) > 1 {
			return o, bad(k, strings.Join(vs, ","), "given more than once")
		}
	}
	for name, dst := range map[string]*bool{"stdin": &o.Stdin, "stdout": &o.Stdout, "stderr": &o.Stderr, "tty": &o.TTY} {
		if v := q.Get(name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return o, bad(name, v, "must be true or false")
			}
			*dst = b
		}
	}
	o.Container = q.Get("container")
	if len(o.Container) > 253 {
		return o, bad("container", o.Container, "must be no more than 253 characters")
	}
	o.Command = q["command"]
	if len(o.Command) == 0 {
		return o, apierrors.NewBadRequest("command: Required value: you must specify a command")
	}
	if len(o.Command) > maxExecArgs {
		return o, apierrors.NewBadRequest(fmt.Sprintf("command: Too many: %d: must have at most %d arguments", len(o.Command), maxExecArgs))
	}
	n := 0
	for _, a := range o.Command {
		n += len(a)
		if strings.IndexByte(a, 0) >= 0 {
			return o, bad("command", a, "must not contain a NUL byte")
		}
	}
	if n > maxExecArgsBytes {
		return o, apierrors.NewBadRequest(fmt.Sprintf("command: Too long: %d bytes: must be at most %d", n, maxExecArgsBytes))
	}
	if !o.Stdin && !o.Stdout && !o.Stderr {
		return o, apierrors.NewBadRequest("you must specify at least 1 of stdin, stdout, stderr")
	}
	if o.TTY {
		return o, bad("tty", "true", "knbox runs exec without a terminal: leave out -t")
	}
	return o, nil
}

// parseForwardPorts checks pods/portforward's ports (the WebSocket
// protocol's query; over SPDY the kubelet code reads each stream's port).
func parseForwardPorts(q url.Values) error {
	n := 0
	for _, v := range q["ports"] {
		for _, p := range strings.Split(v, ",") {
			n++
			if n > maxForwardPorts {
				return apierrors.NewBadRequest(fmt.Sprintf("ports: Too many: must have at most %d ports", maxForwardPorts))
			}
			port, err := strconv.ParseUint(p, 10, 16)
			if err != nil || port < 1 {
				return apierrors.NewBadRequest(fmt.Sprintf("ports: invalid value %q: must be a port number from 1 to 65535", p))
			}
		}
	}
	return nil
}

// handlePodExec runs a command in a container of a Pod's instance over
// SPDY or WebSocket (the kubelet's streaming code).
func (s *Server) handlePodExec(w http.ResponseWriter, r *http.Request, req request) error {
	p, err := s.streamPod(r, req)
	if err != nil {
		return err
	}
	o, err := parseExecOptions(r.URL.Query())
	if err != nil {
		return err
	}
	if o.Container, err = podContainer(p, o.Container); err != nil {
		return err
	}
	if !podRunning(p) {
		return apierrors.NewBadRequest(fmt.Sprintf("unable to upgrade connection: container not found (%q) or pod %s is not running", o.Container, p.Name))
	}
	// The kubelet's code reads its own spelling of the options.
	kq := url.Values{}
	for name, on := range map[string]bool{"input": o.Stdin, "output": o.Stdout, "error": o.Stderr} {
		if on {
			kq.Set(name, "1")
		}
	}
	r2 := r.Clone(r.Context())
	r2.URL.RawQuery = kq.Encode()
	opts := &kuberemotecommand.Options{Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr}
	kuberemotecommand.ServeExec(streamWriter{w}, r2, podExecutor{s: s, pod: p}, p.Name, p.UID, o.Container, o.Command, opts,
		s.limits.StreamIdleTimeout, s.limits.StreamCreationTimeout, remotecommandconsts.SupportedStreamingProtocols)
	return nil
}

// handlePodPortForward forwards connections to ports of a Pod's instance
// (its network namespace's loopback) over SPDY or WebSocket.
func (s *Server) handlePodPortForward(w http.ResponseWriter, r *http.Request, req request) error {
	p, err := s.streamPod(r, req)
	if err != nil {
		return err
	}
	if err := parseForwardPorts(r.URL.Query()); err != nil {
		return err
	}
	if !podRunning(p) {
		return apierrors.NewBadRequest(fmt.Sprintf("pod %s is not running", p.Name))
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	portforward.ServePortForward(streamWriter{w}, r, podForwarder{s: s, pod: p}, p.Name, p.UID, opts,
		s.limits.StreamIdleTimeout, s.limits.StreamCreationTimeout, portforward.SupportedProtocols)
	return nil
}

// streamPod reads the Pod of an exec or port-forward. A WebSocket upgrade
// is a GET, authorized as "get"; as kube-apiserver does since 1.31, it
// must be allowed "create" as well, the verb of the same request over
// SPDY.
func (s *Server) streamPod(r *http.Request, req request) (*corev1.Pod, error) {
	if r.Method == http.MethodGet {
		ri := requestInfoFrom(r.Context())
		u := userInfoFrom(r.Context())
		if ri != nil && u != nil {
			attrs := attributes(u, ri)
			attrs.Verb = "create"
			if d, reason, _ := s.authz.Authorize(r.Context(), attrs); d != authorizer.DecisionAllow {
				return nil, forbidden(attrs, reason)
			}
		}
	}
	obj, _, err := s.getStored(req.kind, req.namespace, req.name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Pod), nil
}

func podRunning(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning
}

// podExecutor is the kubelet streaming code's Executor over Options.Exec.
type podExecutor struct {
	s   *Server
	pod *corev1.Pod
}

func (e podExecutor) ExecInContainer(ctx context.Context, _ string, _ types.UID, container string, cmd []string,
	in io.Reader, out, errw io.WriteCloser, tty bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	if tty {
		return errors.New("a terminal is not supported")
	}
	var stdout, stderr io.Writer
	if out != nil {
		stdout = out
	}
	if errw != nil {
		stderr = errw
	}
	code, err := e.s.opts.Exec(ctx, e.pod, container, cmd, in, stdout, stderr)
	if err != nil {
		return err
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	return nil
}

// podForwarder is the kubelet streaming code's PortForwarder over
// Options.PortForward.
type podForwarder struct {
	s   *Server
	pod *corev1.Pod
}

func (f podForwarder) PortForward(ctx context.Context, _ string, _ types.UID, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	conn, err := f.s.opts.PortForward(ctx, f.pod, port)
	if err != nil {
		return fmt.Errorf("connect to port %d of pod %s: %w", port, f.pod.Name, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(conn, stream)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(stream, conn)
		done <- struct{}{}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

var (
	_ kuberemotecommand.Executor = podExecutor{}
	_ portforward.PortForwarder  = podForwarder{}
)

// streamWriter hands the connection over to a stream without the
// deadlines the server's read timeout left on it: a session lasts as long
// as it is used (the idle timeout ends it).
type streamWriter struct{ http.ResponseWriter }

func (s streamWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the connection cannot be taken over")
	}
	c, rw, err := h.Hijack()
	if err == nil {
		_ = c.SetDeadline(time.Time{})
	}
	return c, rw, err
}

func (s streamWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
