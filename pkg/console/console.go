// Package console serves knbox's web console: server-rendered pages at
// /console/ on the API address, with a small embedded CSS and JS bundle
// (no CDN: machines may be offline). It shows namespaces, Services with
// their URL and readiness, Revisions with their traffic and tags, graphs of
// instances, request rate and latency, and a Revision's log tail.
//
// It owns sign-in (a token, kept server-side behind an HttpOnly session
// cookie, or the Authorization header of the kubeconfig's token) and the
// graphs' bounded ring of samples. It must not read the store or the data
// plane: every object it shows comes from an in-process call to the API's
// handler with the user's token, so the API's authentication and RBAC
// decide what a user sees, and the graphs are shown only to users the
// API lets read /metrics, and only for Revisions they may read.
package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Prefix is the path the console is served under.
const Prefix = "/console/"

// The defaults of Options' zero values.
const (
	DefaultMaxSessions    = 1000
	DefaultSessionTTL     = 12 * time.Hour
	DefaultSampleInterval = 5 * time.Second
	DefaultSamples        = 120
)

// cookieName is the session cookie's name.
const cookieName = "knbox_console"

// maxTokenBytes bounds the token of a sign-in.
const maxTokenBytes = 4096

//go:embed ui
var ui embed.FS

// Options configure a Console. Zero values are documented defaults.
type Options struct {
	// API is the API server's handler; the console reads everything
	// through it with the user's token. Required.
	API http.Handler
	// Totals returns the revisions' metrics totals for the graphs; nil:
	// no graphs.
	Totals func() ([]Totals, error)
	// LatencyBounds are the upper bounds (milliseconds) of Totals'
	// latency buckets, +Inf excluded.
	LatencyBounds []float64
	// MaxSessions bounds the signed-in sessions; 0 means
	// DefaultMaxSessions.
	MaxSessions int
	// SessionTTL is a session's lifetime; 0 means DefaultSessionTTL.
	SessionTTL time.Duration
	// SampleInterval is how often the graphs sample Totals; 0 means
	// DefaultSampleInterval.
	SampleInterval time.Duration
	// Samples is how many samples each revision keeps; 0 means
	// DefaultSamples.
	Samples int
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Console is the web console. Create it with New, run Run, serve Handler
// under Prefix.
type Console struct {
	opts    Options
	log     *slog.Logger
	pages   *template.Template
	static  http.Handler
	samples *sampler

	mu       sync.Mutex
	sessions map[string]session // by sessionKey of the cookie's value
}

type session struct {
	token   string
	user    string
	expires time.Time
}

// New builds a Console.
func New(o Options) (*Console, error) {
	if o.API == nil {
		return nil, errors.New("console: API is required")
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.SampleInterval <= 0 {
		o.SampleInterval = DefaultSampleInterval
	}
	if o.Samples <= 1 {
		o.Samples = DefaultSamples
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	pages, err := template.New("").Funcs(funcs).ParseFS(ui, "ui/*.html")
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(ui, "ui/static")
	if err != nil {
		return nil, err
	}
	return &Console{opts: o, log: o.Logger, pages: pages,
		static:   http.StripPrefix(Prefix+"static/", http.FileServer(http.FS(static))),
		samples:  newSampler(o.Totals, o.LatencyBounds, o.SampleInterval, o.Samples),
		sessions: map[string]session{}}, nil
}

// Run samples the metrics for the graphs until ctx ends.
func (c *Console) Run(ctx context.Context) { c.samples.run(ctx) }

// Handler serves the console; mount it at Prefix.
func (c *Console) Handler() http.Handler { return http.HandlerFunc(c.serveHTTP) }

// Mount returns a handler that serves the console under Prefix and api
// for every other path.
func Mount(c *Console, api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == strings.TrimSuffix(Prefix, "/") || strings.HasPrefix(r.URL.Path, Prefix) {
			c.serveHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

func (c *Console) serveHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer browsers send
	// "Origin: null" on form posts, which sameOrigin refuses.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	rt, err := parseRoute(r.URL.Path)
	if err != nil {
		c.fail(w, r, "", http.StatusNotFound, err.Error())
		return
	}
	if rt.page == pageStatic {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			c.fail(w, r, "", http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		h.Set("Cache-Control", "no-cache")
		c.static.ServeHTTP(w, r)
		return
	}
	if rt.page == pageLogin {
		c.serveLogin(w, r)
		return
	}
	ctx := context.WithValue(r.Context(), remoteKey{}, r.RemoteAddr)
	r = r.WithContext(ctx)
	token, user, sid := c.credentials(r)
	if token == "" {
		if r.Method == http.MethodGet {
			http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
			return
		}
		c.fail(w, r, "", http.StatusUnauthorized, "sign in first")
		return
	}
	if rt.page == pageLogout {
		if r.Method != http.MethodPost {
			c.fail(w, r, user, http.StatusMethodNotAllowed, "sign out with POST")
			return
		}
		c.mu.Lock()
		delete(c.sessions, sid)
		c.mu.Unlock()
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		c.fail(w, r, user, http.StatusMethodNotAllowed, "the console only reads")
		return
	}
	v := view{User: user, Interval: int(c.opts.SampleInterval / time.Millisecond)}
	switch rt.page {
	case pageHome:
		err = c.home(ctx, token, r, &v)
	case pageService:
		err = c.service(ctx, token, rt.namespace, rt.name, &v)
	case pageLog:
		err = c.logTail(ctx, token, rt.namespace, rt.name, &v)
	}
	if err != nil {
		var ie *inputError
		switch {
		case errors.As(err, &ie):
			c.fail(w, r, user, http.StatusBadRequest, ie.Error())
		case codeOf(err) == http.StatusUnauthorized:
			c.forget(sid)
			http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
		default:
			code := codeOf(err)
			if code == http.StatusInternalServerError {
				c.log.Error("console page failed", "path", r.URL.Path, "err", err)
			}
			c.fail(w, r, user, code, err.Error())
		}
		return
	}
	code := http.StatusOK
	if v.Code != 0 {
		code = v.Code
	}
	c.render(w, code, v.Template, v)
}

// credentials are the request's token: its Authorization header (the
// kubeconfig's token) or its session's. sid is the session's id.
func (c *Console) credentials(r *http.Request) (token, user, sid string) {
	if scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " "); ok && strings.EqualFold(scheme, "bearer") {
		if tok = strings.TrimSpace(tok); tok != "" && len(tok) <= maxTokenBytes {
			u, _ := c.whoAmI(r.Context(), tok)
			return tok, u, ""
		}
	}
	ck, err := r.Cookie(cookieName)
	if err != nil || len(ck.Value) != 43 {
		return "", "", ""
	}
	// Sessions are kept by a hash of their id: a map lookup's timing
	// tells nothing about an id.
	sid = sessionKey(ck.Value)
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sessions[sid]
	if !ok {
		return "", "", ""
	}
	if time.Now().After(s.expires) {
		delete(c.sessions, sid)
		return "", "", ""
	}
	return s.token, s.user, sid
}

func sessionKey(id string) string {
	h := sha256.Sum256([]byte(id))
	return string(h[:])
}

func (c *Console) forget(sid string) {
	if sid == "" {
		return
	}
	c.mu.Lock()
	delete(c.sessions, sid)
	c.mu.Unlock()
}

// newSession keeps token for a new session and returns its id, or false
// when MaxSessions are signed in.
func (c *Console) newSession(token, user string) (string, bool) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", false
	}
	id := base64.RawURLEncoding.EncodeToString(b)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sessions) >= c.opts.MaxSessions {
		for k, s := range c.sessions {
			if now.After(s.expires) {
				delete(c.sessions, k)
			}
		}
		if len(c.sessions) >= c.opts.MaxSessions {
			return "", false
		}
	}
	c.sessions[sessionKey(id)] = session{token: token, user: user, expires: now.Add(c.opts.SessionTTL)}
	return id, true
}

// serveLogin shows the sign-in form and signs in with a token.
func (c *Console) serveLogin(w http.ResponseWriter, r *http.Request) {
	v := view{Template: "login", Title: "Sign in"}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		c.render(w, http.StatusOK, "login", v)
		return
	case http.MethodPost:
	default:
		c.fail(w, r, "", http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if !sameOrigin(r) {
		v.Error = "the sign-in form was posted from another site"
		c.render(w, http.StatusForbidden, "login", v)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 2*maxTokenBytes)
	if err := r.ParseForm(); err != nil {
		v.Error = "token: the form is malformed or larger than " + itoa(2*maxTokenBytes) + " bytes"
		c.render(w, http.StatusBadRequest, "login", v)
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if msg := checkToken(token); msg != "" {
		v.Error = "token: " + msg
		c.render(w, http.StatusBadRequest, "login", v)
		return
	}
	ctx := context.WithValue(r.Context(), remoteKey{}, r.RemoteAddr)
	user, err := c.whoAmI(ctx, token)
	if err != nil {
		v.Error = "token: the API refused it"
		c.render(w, http.StatusUnauthorized, "login", v)
		return
	}
	id, ok := c.newSession(token, user)
	if !ok {
		v.Error = "too many console sessions are signed in (observability.console.maxSessions); try again later"
		c.render(w, http.StatusServiceUnavailable, "login", v)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: Prefix, MaxAge: int(c.opts.SessionTTL / time.Second),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// sameOrigin reports whether a form post came from the console's own
// pages: browsers send Origin with every POST, and a post from another site
// could sign the victim in as the attacker (login CSRF). Clients without
// Origin (curl) are not browsers and pass.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// checkToken says what is wrong with a token typed in, "" if nothing.
func checkToken(t string) string {
	switch {
	case t == "":
		return "required"
	case len(t) > maxTokenBytes:
		return "longer than " + itoa(maxTokenBytes) + " bytes"
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return "may hold only printable ASCII characters without spaces"
		}
	}
	return ""
}

// render writes a page.
func (c *Console) render(w http.ResponseWriter, code int, name string, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var b strings.Builder
	if err := c.pages.ExecuteTemplate(&b, name, v); err != nil {
		c.log.Error("console template", "template", name, "err", err)
		http.Error(w, "the console could not draw this page", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// fail renders an error page.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, user string, code int, msg string) {
	c.render(w, code, "error", view{Template: "error", Title: http.StatusText(code), User: user, Error: msg, Code: code})
}
