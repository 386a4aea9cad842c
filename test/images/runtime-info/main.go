// Command runtime-info is the test server of the Knative runtime contract
// tests: it reports what the container it runs in looks like from inside
// (environment, identity, files, mounts, cgroup limits, the request as
// received) and offers endpoints to sleep, stream, exit, allocate memory,
// log and fail its health check on demand.
//
// It listens on $PORT (default 8080) and serves HTTP/1.1 and h2c on it.
// Endpoints:
//
//	GET /              JSON Info; ?path=/x adds files to the list (repeatable)
//	/concurrency       requests in flight now and the most seen since start (or ?reset=1); requests to
//	                   /concurrency and /healthz are not counted
//	/sleep?ms=N        answers after N ms (at most 60000)
//	/stream?n=N        writes N chunks 100ms apart, flushing each (at most 600)
//	/bytes?n=N         answers N bytes (default 13, at most 16 MiB) with their Content-Length
//	/exit?code=N&msg=M writes M to /dev/termination-log if it exists, answers, exits with N
//	/alloc?mb=N        allocates and touches N MiB more and keeps them (to hit memory limits)
//	/log?msg=M         writes M to stdout, stderr and the syslog socket /dev/log
//	/healthz           200, or 500 once /fail-health was called
//	/fail-health       makes /healthz fail from now on
//	/net               JSON []Interface: the network interfaces and their addresses
//	/file?path=P       answers the contents of file P (at most 1 MiB), as a projected token's reader would
//	/dial?addr=A&ms=N  connects to A (IP:PORT) over TCP within N ms (default 5000), reads a line: JSON DialResult
//	/kubeapi?path=P    GETs P from the platform's API as an in-cluster client (KUBERNETES_SERVICE_HOST/PORT,
//	                   the mounted ServiceAccount token and ca.crt; ?host=H dials H instead): JSON FetchResult
//
// On SIGTERM it prints "SIGTERM received" to stdout, stops accepting
// requests, waits for those in flight (at most 10s) and exits 0.
//
// It depends on the standard library and golang.org/x/net/http2 only, so
// that it builds as a small static binary (CGO_ENABLED=0).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	//lint:ignore SA1019 h2c.NewHandler serves both prior-knowledge h2c and the HTTP/1.1 Upgrade: h2c that Knative's data plane accepts; net/http's Protocols serves prior knowledge only
	"golang.org/x/net/http2/h2c"
)

// DefaultFiles are reported by GET / in addition to ?path= ones.
var DefaultFiles = []string{
	"/tmp", "/var/log", "/dev/log", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf",
	"/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/console", "/dev/null",
	"/dev/zero", "/dev/random", "/dev/urandom", "/dev/full", "/dev/tty", "/dev/ptmx",
	"/dev/shm", "/proc/sys",
}

// Limits of the endpoints.
const (
	maxSleep       = 60 * time.Second
	maxChunks      = 600
	maxBytes       = 16 << 20
	chunkInterval  = 100 * time.Millisecond
	maxAllocMiB    = 64 << 10
	shutdownBudget = 10 * time.Second
)

// Info is the answer of GET /.
type Info struct {
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
	Files       []File            `json:"files"`
	Mounts      []Mount           `json:"mounts"`
	Cgroup      Cgroup            `json:"cgroup"`
	Request     Request           `json:"request"`
	InFlight    int64             `json:"inFlight"`    // other requests in flight
	MaxInFlight int64             `json:"maxInFlight"` // the most in flight since start, this one counted
}

// File is what a path looks like from inside.
type File struct {
	Path     string `json:"path"`
	Exists   bool   `json:"exists"`
	Mode     string `json:"mode,omitempty"` // fs.FileMode.String(), "Dcrw-rw-rw-"
	Perm     string `json:"perm,omitempty"` // octal permission bits with setuid/setgid/sticky, "1777"
	Type     string `json:"type,omitempty"` // file, dir, symlink, socket, chardev, blockdev, fifo
	Size     int64  `json:"size"`
	UID      int    `json:"uid"`
	GID      int    `json:"gid"`
	Link     string `json:"link,omitempty"` // symlink target
	Writable bool   `json:"writable"`       // access(W_OK)
	Error    string `json:"error,omitempty"`
}

// Mount is a line of /proc/self/mountinfo.
type Mount struct {
	MountPoint   string `json:"mountPoint"`
	FSType       string `json:"fsType"`
	Source       string `json:"source"`
	Options      string `json:"options"`
	SuperOptions string `json:"superOptions"`
}

// Cgroup reports the limits the container's cgroup files show.
type Cgroup struct {
	Version int    `json:"version"` // 1 or 2, 0 if none found
	Path    string `json:"path"`    // of this process, from /proc/self/cgroup
	// MemoryLimit is in bytes, nil when unlimited.
	MemoryLimit *int64 `json:"memoryLimit"`
	// CPUQuota and CPUPeriod are in microseconds; CPUQuota nil when unlimited.
	CPUQuota  *int64 `json:"cpuQuota"`
	CPUPeriod int64  `json:"cpuPeriod"`
	// CPUShares is cpu.shares (v1), or derived from cpu.weight (v2).
	CPUShares int64 `json:"cpuShares"`
	CPUWeight int64 `json:"cpuWeight,omitempty"` // v2 only
	// Files are the raw files read, with whether they are writable.
	Files []CgroupFile `json:"files"`
}

// CgroupFile is a cgroup control file as read from inside.
type CgroupFile struct {
	Path     string `json:"path"`
	Value    string `json:"value"`
	Writable bool   `json:"writable"`
	Error    string `json:"error,omitempty"`
}

// Request is the request as the server received it.
type Request struct {
	Method     string              `json:"method"`
	URI        string              `json:"uri"`
	Host       string              `json:"host"`
	Proto      string              `json:"proto"` // HTTP/1.1 or HTTP/2.0
	RemoteAddr string              `json:"remoteAddr"`
	Headers    map[string][]string `json:"headers"`
}

type server struct {
	started     time.Time
	stdinEOF    bool
	stdinDetail string

	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	unhealthy   atomic.Bool

	allocMu sync.Mutex
	alloc   [][]byte
}

func main() {
	log.SetFlags(0)
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	s := &server{started: time.Now()}
	s.stdinEOF, s.stdinDetail = checkStdin()

	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	//lint:ignore SA1019 h2c.NewHandler serves both prior-knowledge h2c and the HTTP/1.1 Upgrade: h2c that Knative's data plane accepts; net/http's Protocols serves prior knowledge only
	srv := &http.Server{Handler: h2c.NewHandler(s.handler(), &http2.Server{}), ReadHeaderTimeout: 10 * time.Second}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		<-sigs
		fmt.Println("SIGTERM received")
		ctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
		defer cancel()
		srv.Shutdown(ctx)
		// h2c connections are hijacked, so Shutdown does not wait for
		// them: wait for the in-flight count instead.
		for s.inFlight.Load() > 0 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		close(done)
	}()
	fmt.Printf("runtime-info listening on %s\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("serve: %v", err)
	}
	<-done
	os.Exit(0)
}

// checkStdin says whether stdin reads EOF at once, as the runtime contract
// wants; a read that blocks for 200ms counts as not EOF.
func checkStdin() (bool, string) {
	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var b [1]byte
		n, err := os.Stdin.Read(b[:])
		ch <- result{n, err}
	}()
	select {
	case r := <-ch:
		switch {
		case r.err == io.EOF:
			return true, "EOF"
		case r.err != nil:
			return false, "error: " + r.err.Error()
		default:
			return false, fmt.Sprintf("read %d bytes", r.n)
		}
	case <-time.After(200 * time.Millisecond):
		return false, "read blocked"
	}
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", s.info)
	mux.HandleFunc("/concurrency", s.concurrency)
	mux.HandleFunc("/sleep", s.sleep)
	mux.HandleFunc("/stream", s.stream)
	mux.HandleFunc("/bytes", sized)
	mux.HandleFunc("/exit", s.exit)
	mux.HandleFunc("/alloc", s.allocate)
	mux.HandleFunc("/log", s.logMsg)
	mux.HandleFunc("/healthz", s.healthz)
	mux.HandleFunc("/net", interfaces)
	mux.HandleFunc("/dial", dial)
	mux.HandleFunc("/fetch", fetch)
	mux.HandleFunc("/kubeapi", kubeAPI)
	mux.HandleFunc("/resolve", resolve)
	mux.HandleFunc("/file", readFile)
	mux.HandleFunc("/fail-health", func(w http.ResponseWriter, r *http.Request) {
		s.unhealthy.Store(true)
		io.WriteString(w, "health checks fail from now on\n")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Probes of the counters and of health are not load.
		if r.URL.Path == "/concurrency" || r.URL.Path == "/healthz" {
			mux.ServeHTTP(w, r)
			return
		}
		n := s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		for {
			m := s.maxInFlight.Load()
			if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		mux.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (s *server) info(w http.ResponseWriter, r *http.Request) {
	info := Info{
		Env:         map[string]string{},
		Args:        os.Args,
		PID:         os.Getpid(),
		UID:         os.Getuid(),
		GID:         os.Getgid(),
		EUID:        os.Geteuid(),
		EGID:        os.Getegid(),
		StdinEOF:    s.stdinEOF,
		StdinDetail: s.stdinDetail,
		Started:     s.started,
		InFlight:    s.inFlight.Load() - 1,
		MaxInFlight: s.maxInFlight.Load(),
		Mounts:      mounts(),
		Cgroup:      cgroup(),
		Request: Request{
			Method:     r.Method,
			URI:        r.RequestURI,
			Host:       r.Host,
			Proto:      r.Proto,
			RemoteAddr: r.RemoteAddr,
			Headers:    r.Header,
		},
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		info.Env[k] = v
	}
	info.Groups, _ = os.Getgroups()
	info.Cwd, _ = os.Getwd()
	info.Hostname, _ = os.Hostname()
	for _, p := range append(append([]string(nil), DefaultFiles...), r.URL.Query()["path"]...) {
		info.Files = append(info.Files, fileInfo(p))
	}
	writeJSON(w, info)
}

func fileInfo(p string) File {
	f := File{Path: p}
	fi, err := os.Lstat(p)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	f.Exists = true
	f.Mode = fi.Mode().String()
	f.Size = fi.Size()
	perm := uint32(fi.Mode().Perm())
	if fi.Mode()&os.ModeSetuid != 0 {
		perm |= 0o4000
	}
	if fi.Mode()&os.ModeSetgid != 0 {
		perm |= 0o2000
	}
	if fi.Mode()&os.ModeSticky != 0 {
		perm |= 0o1000
	}
	f.Perm = fmt.Sprintf("%04o", perm)
	switch m := fi.Mode(); {
	case m.IsDir():
		f.Type = "dir"
	case m&os.ModeSymlink != 0:
		f.Type = "symlink"
		f.Link, _ = os.Readlink(p)
	case m&os.ModeSocket != 0:
		f.Type = "socket"
	case m&os.ModeCharDevice != 0:
		f.Type = "chardev"
	case m&os.ModeDevice != 0:
		f.Type = "blockdev"
	case m&os.ModeNamedPipe != 0:
		f.Type = "fifo"
	default:
		f.Type = "file"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		f.UID, f.GID = int(st.Uid), int(st.Gid)
	}
	f.Writable = syscall.Access(p, 2 /* W_OK */) == nil
	return f
}

func mounts() []Mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []Mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		before, after, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pre, post := strings.Fields(before), strings.Fields(after)
		if len(pre) < 6 || len(post) < 3 {
			continue
		}
		out = append(out, Mount{
			MountPoint:   unescape(pre[4]),
			Options:      pre[5],
			FSType:       post[0],
			Source:       unescape(post[1]),
			SuperOptions: post[2],
		})
	}
	return out
}

// unescape undoes mountinfo's octal escapes ("\040" for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroup reads this process's cgroup limits, v2 or v1. A cgroup namespace
// makes /sys/fs/cgroup the container's own cgroup; without one the path
// from /proc/self/cgroup is tried first.
func cgroup() Cgroup {
	var c Cgroup
	paths := map[string]string{} // controller ("" for v2) -> path
	if raw, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			for _, ctl := range strings.Split(parts[1], ",") {
				paths[ctl] = parts[2]
			}
		}
	}
	read := func(candidates ...string) (CgroupFile, bool) {
		var last CgroupFile
		for _, p := range candidates {
			raw, err := os.ReadFile(p)
			if err != nil {
				last = CgroupFile{Path: p, Error: err.Error()}
				continue
			}
			f := CgroupFile{Path: p, Value: strings.TrimSpace(string(raw)), Writable: syscall.Access(p, 2) == nil}
			c.Files = append(c.Files, f)
			return f, true
		}
		if last.Path != "" {
			c.Files = append(c.Files, last)
		}
		return last, false
	}
	in := func(root, sub, file string) []string {
		var out []string
		if sub != "" && sub != "/" {
			out = append(out, filepath.Join(root, sub, file))
		}
		return append(out, filepath.Join(root, file))
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		c.Version, c.Path = 2, paths[""]
		if f, ok := read(in("/sys/fs/cgroup", c.Path, "memory.max")...); ok && f.Value != "max" {
			c.MemoryLimit = parseInt(f.Value)
		}
		if f, ok := read(in("/sys/fs/cgroup", c.Path, "cpu.max")...); ok {
			quota, period, _ := strings.Cut(f.Value, " ")
			if quota != "max" {
				c.CPUQuota = parseInt(quota)
			}
			if p := parseInt(period); p != nil {
				c.CPUPeriod = *p
			}
		}
		if f, ok := read(in("/sys/fs/cgroup", c.Path, "cpu.weight")...); ok {
			if w := parseInt(f.Value); w != nil {
				c.CPUWeight = *w
				// The inverse of runc's shares -> weight conversion.
				c.CPUShares = 2 + ((*w-1)*262142)/9999
			}
		}
		return c
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil {
		c.Version = 1
	} else if _, err := os.Stat("/sys/fs/cgroup/cpu"); err == nil {
		c.Version = 1
	} else {
		return c
	}
	c.Path = paths["memory"]
	if f, ok := read(in("/sys/fs/cgroup/memory", paths["memory"], "memory.limit_in_bytes")...); ok {
		// v1 says "unlimited" with a huge page-aligned number.
		if v := parseInt(f.Value); v != nil && *v < 1<<62 {
			c.MemoryLimit = v
		}
	}
	if f, ok := read(in("/sys/fs/cgroup/cpu", paths["cpu"], "cpu.cfs_quota_us")...); ok {
		if v := parseInt(f.Value); v != nil && *v >= 0 {
			c.CPUQuota = v
		}
	}
	if f, ok := read(in("/sys/fs/cgroup/cpu", paths["cpu"], "cpu.cfs_period_us")...); ok {
		if v := parseInt(f.Value); v != nil {
			c.CPUPeriod = *v
		}
	}
	if f, ok := read(in("/sys/fs/cgroup/cpu", paths["cpu"], "cpu.shares")...); ok {
		if v := parseInt(f.Value); v != nil {
			c.CPUShares = *v
		}
	}
	return c
}

func parseInt(s string) *int64 {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return nil
	}
	return &v
}

func (s *server) concurrency(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("reset") != "" {
		s.maxInFlight.Store(s.inFlight.Load())
	}
	writeJSON(w, map[string]int64{
		"inFlight":    s.inFlight.Load(),
		"maxInFlight": s.maxInFlight.Load(),
	})
}

// intParam reads a non-negative integer query parameter.
func intParam(w http.ResponseWriter, r *http.Request, key string, def int) (int, bool) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		http.Error(w, fmt.Sprintf("%s: want a non-negative integer", key), http.StatusBadRequest)
		return 0, false
	}
	return n, true
}

func (s *server) sleep(w http.ResponseWriter, r *http.Request) {
	ms, ok := intParam(w, r, "ms", 0)
	if !ok {
		return
	}
	d := min(time.Duration(ms)*time.Millisecond, maxSleep)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		fmt.Fprintf(w, "slept %dms\n", d.Milliseconds())
	case <-r.Context().Done():
	}
}

// filler is what /bytes answers, a slice of it.
var filler = []byte(strings.Repeat("x", 64<<10))

// sized answers ?n= bytes (default 13, at most maxBytes) with their
// Content-Length: the data-plane benchmark's fixed-size responses.
func sized(w http.ResponseWriter, r *http.Request) {
	n, ok := intParam(w, r, "n", 13)
	if !ok {
		return
	}
	n = min(n, maxBytes)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(n))
	for n > 0 {
		k := min(n, len(filler))
		if _, err := w.Write(filler[:k]); err != nil {
			return
		}
		n -= k
	}
}

func (s *server) stream(w http.ResponseWriter, r *http.Request) {
	n, ok := intParam(w, r, "n", 10)
	if !ok {
		return
	}
	n = min(n, maxChunks)
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/plain")
	for i := range n {
		if i > 0 {
			select {
			case <-time.After(chunkInterval):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "chunk %d\n", i)
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func (s *server) exit(w http.ResponseWriter, r *http.Request) {
	code, ok := intParam(w, r, "code", 0)
	if !ok {
		return
	}
	if msg := r.URL.Query().Get("msg"); msg != "" {
		// Only if the runtime provides it: never create it.
		if f, err := os.OpenFile("/dev/termination-log", os.O_WRONLY|os.O_TRUNC, 0); err == nil {
			io.WriteString(f, msg)
			f.Close()
		}
	}
	fmt.Printf("exiting with code %d\n", code)
	body := fmt.Sprintf("exiting with code %d\n", code)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	io.WriteString(w, body)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	os.Exit(code)
}

func (s *server) allocate(w http.ResponseWriter, r *http.Request) {
	mb, ok := intParam(w, r, "mb", 0)
	if !ok {
		return
	}
	mb = min(mb, maxAllocMiB)
	s.allocMu.Lock()
	defer s.allocMu.Unlock()
	for range mb {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		s.alloc = append(s.alloc, b)
	}
	writeJSON(w, map[string]int{"allocatedMiB": len(s.alloc)})
}

func (s *server) logMsg(w http.ResponseWriter, r *http.Request) {
	msg := r.URL.Query().Get("msg")
	fmt.Fprintln(os.Stdout, msg)
	fmt.Fprintln(os.Stderr, msg)
	res := map[string]string{"stdout": "ok", "stderr": "ok", "syslog": "ok"}
	if err := syslog(msg); err != nil {
		res["syslog"] = err.Error()
	}
	writeJSON(w, res)
}

// syslog sends msg to /dev/log (datagram, else stream) as user.info.
func syslog(msg string) error {
	line := fmt.Sprintf("<14>%s runtime-info[%d]: %s", time.Now().Format(time.Stamp), os.Getpid(), msg)
	var errs []error
	for _, network := range []string{"unixgram", "unix"} {
		c, err := net.DialTimeout(network, "/dev/log", time.Second)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.SetDeadline(time.Now().Add(time.Second))
		data := line
		if network == "unix" {
			data += "\n"
		}
		_, err = io.WriteString(c, data)
		c.Close()
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	if s.unhealthy.Load() {
		http.Error(w, "unhealthy", http.StatusInternalServerError)
		return
	}
	io.WriteString(w, "ok\n")
}

// maxFileBytes bounds what /file answers.
const maxFileBytes = 1 << 20

// readFile answers the contents of the file ?path= names.
func readFile(w http.ResponseWriter, r *http.Request) {
	f, err := os.Open(r.URL.Query().Get("path"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if len(b) > maxFileBytes {
		http.Error(w, "file larger than 1 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(b)
}
