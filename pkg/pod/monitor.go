package pod

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/knbox/knbox/pkg/logs"
	"github.com/knbox/knbox/pkg/runtime"
)

// maxSyslogMessage bounds one datagram on /dev/log.
const maxSyslogMessage = 64 << 10

// monitor owns what a pod's containers leave behind them while they run:
// their processes (created through the handler), their output (the pod's
// log) and the /dev/log socket. The sandbox (directory, network namespace,
// mounts, bundles) is the pod's.
type monitor interface {
	// start creates and starts container id from bundle; its stdout and
	// stderr go to the pod's log, each line starting with tag.
	start(ctx context.Context, id, bundle, tag string) (task, error)
	// prepare creates container id from bundle without starting it
	// (task.start starts it); errCannotPrepare when the handler (or the
	// process that would supervise the container) cannot.
	prepare(ctx context.Context, id, bundle, tag string) (task, error)
	// log writes a line of knbox's own into the pod's log (stderr).
	log(line string)
	// close releases the log and the socket, once every container is
	// deleted.
	close() error
}

// task is one container a monitor started.
type task interface {
	ID() string
	Pid() int
	Kill(ctx context.Context, sig syscall.Signal) error
	// Wait returns once the container has exited and its output is in the
	// log.
	Wait(ctx context.Context) (runtime.ExitStatus, error)
	Delete(ctx context.Context) error
	// start starts a task that prepare made.
	start(ctx context.Context) error
	// tail is the end of what the container wrote, for its termination
	// message.
	tail() string
}

// localMonitor is a monitor in this process: the containers are its
// children (through the handler) and their output is copied here.
type localMonitor struct {
	h          runtime.Handler
	logf       *logs.File
	syslog     *net.UnixConn
	syslogDone chan struct{}
}

// newLocalMonitor opens the pod's log at logPath and makes its /dev/log
// socket, dir/log.sock.
func newLocalMonitor(h runtime.Handler, logPath, dir string) (*localMonitor, error) {
	f, err := logs.Open(logPath)
	if err != nil {
		return nil, err
	}
	conn, err := listenSyslog(dir, "log.sock")
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("syslog socket: %w", err)
	}
	m := &localMonitor{h: h, logf: f, syslog: conn, syslogDone: make(chan struct{})}
	go m.readSyslog() // ends when close closes conn
	return m, nil
}

func (m *localMonitor) start(ctx context.Context, id, bundle, tag string) (task, error) {
	return m.create(ctx, id, bundle, tag, m.h.Create)
}

// errCannotPrepare: the container is to be created and started at once.
var errCannotPrepare = errors.New("the handler cannot prepare containers here")

func (m *localMonitor) prepare(ctx context.Context, id, bundle, tag string) (task, error) {
	pr, ok := m.h.(runtime.Preparer)
	if !ok {
		return nil, errCannotPrepare
	}
	t, err := m.create(ctx, id, bundle, tag, pr.Prepare)
	if errors.Is(err, runtime.ErrNotSubreaper) {
		return nil, errCannotPrepare
	}
	return t, err
}

func (m *localMonitor) create(ctx context.Context, id, bundle, tag string,
	create func(context.Context, string, string, runtime.IO) (runtime.Container, error)) (task, error) {
	t := &localTask{tailBuf: &logs.Tail{}}
	t.stdout = &logs.LineWriter{File: m.logf, Stream: logs.Stdout, Tag: tag, Tail: t.tailBuf}
	t.stderr = &logs.LineWriter{File: m.logf, Stream: logs.Stderr, Tag: tag, Tail: t.tailBuf}
	c, err := create(ctx, id, bundle, runtime.IO{Stdout: t.stdout, Stderr: t.stderr})
	if err != nil {
		return nil, err
	}
	t.Container = c
	return t, nil
}

func (m *localMonitor) log(line string) { m.logf.Line(logs.Stderr, line) }

func (m *localMonitor) close() error {
	m.syslog.Close()
	<-m.syslogDone
	return m.logf.Close()
}

// readSyslog copies datagrams from /dev/log into the log until the socket
// is closed.
func (m *localMonitor) readSyslog() {
	defer close(m.syslogDone)
	buf := make([]byte, maxSyslogMessage)
	for {
		n, _, err := m.syslog.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		msg := strings.TrimRight(string(buf[:n]), "\r\n\x00")
		m.logf.Line(logs.Syslog, msg)
	}
}

// localTask is a container of a localMonitor.
type localTask struct {
	runtime.Container
	stdout, stderr *logs.LineWriter
	tailBuf        *logs.Tail
	flush          sync.Once
}

func (t *localTask) Wait(ctx context.Context) (runtime.ExitStatus, error) {
	st, err := t.Container.Wait(ctx)
	if err == nil {
		// The handler has copied all the output: end a last line that
		// has no newline.
		t.flush.Do(func() {
			t.stdout.Flush()
			t.stderr.Flush()
		})
	}
	return st, err
}

func (t *localTask) start(ctx context.Context) error {
	s, ok := t.Container.(runtime.Starter)
	if !ok {
		return fmt.Errorf("container %s was not prepared", t.ID())
	}
	return s.Start(ctx)
}

func (t *localTask) tail() string { return t.tailBuf.LastLines() }

// listenSyslog makes a datagram socket named name in dir for /dev/log,
// writable by any user. It binds through /proc/self/fd so that a long dir
// does not overflow sun_path.
func listenSyslog(dir, name string) (*net.UnixConn, error) {
	p := filepath.Join(dir, name)
	_ = os.Remove(p)
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	addr := fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(p, 0o666); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

var _ monitor = (*localMonitor)(nil)
