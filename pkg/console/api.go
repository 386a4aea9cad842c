package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxAPIResponse bounds what one API answer may hold in memory.
const maxAPIResponse = 16 << 20

// errTooLarge is a bounded writer's answer once its bound is reached.
var errTooLarge = errors.New("the API's answer is larger than the console reads")

// apiError is an API answer other than 2xx: its status code and the
// message of its metav1.Status.
type apiError struct {
	Code    int
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d: %s", e.Code, e.Message) }

// codeOf returns the HTTP status of an API error, 500 for other errors.
func codeOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return http.StatusInternalServerError
}

// capture is an http.ResponseWriter that keeps the answer of an
// in-process API call, up to limit bytes.
type capture struct {
	h     http.Header
	code  int
	buf   bytes.Buffer
	limit int
	over  bool
}

func (c *capture) Header() http.Header { return c.h }
func (c *capture) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
}
func (c *capture) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	if c.buf.Len()+len(p) > c.limit {
		c.over = true
		return 0, errTooLarge
	}
	return c.buf.Write(p)
}

// tail is an http.ResponseWriter that keeps the last limit bytes written.
type tail struct {
	h     http.Header
	code  int
	buf   []byte
	limit int
	cut   bool // bytes before buf were dropped
}

func (t *tail) Header() http.Header { return t.h }
func (t *tail) WriteHeader(code int) {
	if t.code == 0 {
		t.code = code
	}
}
func (t *tail) Write(p []byte) (int, error) {
	t.WriteHeader(http.StatusOK)
	n := len(p)
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		t.cut = true
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// call makes one in-process API request as the holder of token, so the
// API's authentication, RBAC and limits decide as for any client, and
// decodes a 2xx JSON answer into out (nil: ignored).
func (c *Console) call(ctx context.Context, token, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.RemoteAddr = remoteAddrFrom(ctx)
	w := &capture{h: http.Header{}, limit: maxAPIResponse}
	c.opts.API.ServeHTTP(w, req)
	if w.over {
		return errTooLarge
	}
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if w.code < 200 || w.code > 299 {
		return statusError(w.code, w.buf.Bytes())
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(w.buf.Bytes(), out); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// statusError reads the metav1.Status of an API error.
func statusError(code int, b []byte) error {
	var st metav1.Status
	if json.Unmarshal(b, &st) == nil && st.Message != "" {
		return &apiError{Code: code, Message: st.Message}
	}
	return &apiError{Code: code, Message: http.StatusText(code)}
}

type remoteKey struct{}

func remoteAddrFrom(ctx context.Context) string {
	s, _ := ctx.Value(remoteKey{}).(string)
	return s
}
