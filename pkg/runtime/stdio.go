package runtime

import (
	"io"
	"os"
	"time"
)

// drainGrace bounds how long output is still copied after a container's init
// has exited: a process that escaped the container's end (possible with the
// process handler, or a runtime helper that exits late) may hold the pipes.
const drainGrace = 2 * time.Second

// stdio holds both ends of a container's standard streams: stdin is
// /dev/null; stdout and stderr are pipes whose write ends go to the child and
// whose read ends stay here.
type stdio struct {
	stdin          *os.File
	outW, errW     *os.File
	outR, errR     *os.File
	closedChildEnd bool
}

func newStdio() (*stdio, error) {
	s := &stdio{}
	var err error
	if s.stdin, err = os.Open(os.DevNull); err != nil {
		return nil, err
	}
	if s.outR, s.outW, err = os.Pipe(); err != nil {
		s.close()
		return nil, err
	}
	if s.errR, s.errW, err = os.Pipe(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// closeChildEnds closes this process's copies of the child's ends, once the
// child holds them, so that the read ends see EOF when the child is gone.
func (s *stdio) closeChildEnds() {
	if s.closedChildEnd {
		return
	}
	s.closedChildEnd = true
	for _, f := range []*os.File{s.stdin, s.outW, s.errW} {
		if f != nil {
			f.Close()
		}
	}
}

func (s *stdio) close() {
	s.closeChildEnds()
	for _, f := range []*os.File{s.outR, s.errR} {
		if f != nil {
			f.Close()
		}
	}
}

// readStderr returns what the stderr pipe holds, waiting at most d for
// writers to go away. It is for error messages when a start failed; nothing
// has been copied to the caller's IO then.
func (s *stdio) readStderr(d time.Duration) []byte {
	s.closeChildEnds()
	_ = s.errR.SetReadDeadline(time.Now().Add(d))
	b, _ := io.ReadAll(io.LimitReader(s.errR, 64<<10))
	return b
}

// pump copies one stream until EOF or until its read end is closed.
type pump struct {
	r    *os.File
	done chan struct{}
}

func startPump(r *os.File, w io.Writer) *pump {
	p := &pump{r: r, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 && w != nil {
				if _, werr := w.Write(buf[:n]); werr != nil {
					w = nil // keep draining so the container never blocks
				}
			}
			if err != nil { // io.EOF, or the read end was closed by drain
				return
			}
		}
	}()
	return p
}

// drain waits until every pump has seen EOF, closing the read ends after
// grace so that writers that outlive the container cannot hold it forever.
func drain(grace time.Duration, ps ...*pump) {
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for _, p := range ps {
		select {
		case <-p.done:
		case <-timer.C:
			for _, q := range ps {
				q.r.Close()
			}
			<-p.done
		}
	}
	for _, p := range ps {
		p.r.Close()
	}
}
