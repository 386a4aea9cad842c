package console

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"knative.dev/pkg/apis"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// The console's pages.
const (
	pageHome = iota
	pageLogin
	pageLogout
	pageStatic
	pageService
	pageLog
)

type route struct {
	page            int
	namespace, name string
}

// inputError is a request the console refuses: 400 with its message.
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

// parseRoute reads the console's paths:
//
//	/console/                                        namespaces and Services
//	/console/login, /console/logout
//	/console/static/FILE
//	/console/namespaces/NS/services/NAME             a Service and its Revisions
//	/console/namespaces/NS/revisions/NAME/log        a Revision's log tail
func parseRoute(p string) (route, error) {
	rest, ok := strings.CutPrefix(p, Prefix)
	if !ok {
		if p == strings.TrimSuffix(Prefix, "/") {
			return route{page: pageHome}, nil
		}
		return route{}, fmt.Errorf("%q is not a console path", p)
	}
	switch rest {
	case "":
		return route{page: pageHome}, nil
	case "login":
		return route{page: pageLogin}, nil
	case "logout":
		return route{page: pageLogout}, nil
	}
	if f, ok := strings.CutPrefix(rest, "static/"); ok {
		if f == "" || strings.Contains(f, "/") || strings.HasPrefix(f, ".") {
			return route{}, fmt.Errorf("no such file %q", f)
		}
		return route{page: pageStatic}, nil
	}
	segs := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	if len(segs) < 4 || segs[0] != "namespaces" {
		return route{}, fmt.Errorf("the console has no page %q", p)
	}
	rt := route{namespace: segs[1], name: segs[3]}
	switch {
	case len(segs) == 4 && segs[2] == "services":
		rt.page = pageService
	case len(segs) == 5 && segs[2] == "revisions" && segs[4] == "log":
		rt.page = pageLog
	default:
		return route{}, fmt.Errorf("the console has no page %q", p)
	}
	if errs := validation.IsDNS1123Label(rt.namespace); len(errs) > 0 {
		return route{}, fmt.Errorf("namespace %q: %s", rt.namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(rt.name); len(errs) > 0 {
		return route{}, fmt.Errorf("name %q: %s", rt.name, strings.Join(errs, "; "))
	}
	return rt, nil
}

// view is what a page's template reads.
type view struct {
	Template, Title string
	User            string
	Error           string
	Code            int
	Interval        int // milliseconds between the page's refreshes

	Namespace  string
	Namespaces []string
	NSNote     string // why the namespaces could not be listed
	Services   []serviceRow

	Service   *serviceRow
	Traffic   []trafficRow
	Revisions []revisionRow
	MetricsOK bool

	Events       []eventRow
	EventsServed bool   // the API serves Events
	EventsNote   string // why no events are shown, when the API has them

	Revision string
	Log      string
	LogCut   bool
}

type eventRow struct {
	Type, Reason, Object, Message string
	Count                         int32
	Last                          time.Time
}

type serviceRow struct {
	Name, URL     string
	Ready, Reason string // Ready: True, False or Unknown
	Latest        string
	Created       time.Time
	Generation    int64
}

type trafficRow struct {
	Revision, Tag, URL string
	Percent, Offset    int64 // Offset: the percent of the rows before
	Latest             bool
}

type revisionRow struct {
	Name, Ready, Reason string
	Created             time.Time
	Percent             int64
	Tags                []string
	Image               string
	Graphs              []Graph
}

var funcs = template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := time.Since(t).Round(time.Second)
		switch {
		case d < time.Minute:
			return fmt.Sprintf("%ds", int(d.Seconds()))
		case d < time.Hour:
			return fmt.Sprintf("%dm", int(d.Minutes()))
		case d < 48*time.Hour:
			return fmt.Sprintf("%dh", int(d.Hours()))
		default:
			return fmt.Sprintf("%dd", int(d.Hours()/24))
		}
	},
	"lower": strings.ToLower,
	"nsq":   func(ns string) string { return url.QueryEscape(ns) },
	"safeurl": func(s string) template.URL {
		// Only http(s) URLs of the API's own objects are linked.
		if u, err := url.Parse(s); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
			return template.URL(u.String())
		}
		return ""
	},
}

func itoa(n int) string { return strconv.Itoa(n) }

// whoAmI asks the API who holds token (a SelfSubjectReview).
func (c *Console) whoAmI(ctx context.Context, token string) (string, error) {
	var r authenticationv1.SelfSubjectReview
	r.APIVersion, r.Kind = "authentication.k8s.io/v1", "SelfSubjectReview"
	if err := c.call(ctx, token, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", &r, &r); err != nil {
		return "", err
	}
	return r.Status.UserInfo.Username, nil
}

// canReadMetrics asks the API whether the holder of token may get /metrics.
func (c *Console) canReadMetrics(ctx context.Context, token string) bool {
	r := authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}}
	r.APIVersion, r.Kind = "authorization.k8s.io/v1", "SelfSubjectAccessReview"
	if err := c.call(ctx, token, http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", &r, &r); err != nil {
		return false
	}
	return r.Status.Allowed
}

// home lists the namespaces and the Services of one.
func (c *Console) home(ctx context.Context, token string, r *http.Request, v *view) error {
	v.Template, v.Title = "home", "Services"
	v.Namespace = "default"
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return &inputError{fmt.Sprintf("namespace: %q: %s", ns, strings.Join(errs, "; "))}
		}
		v.Namespace = ns
	}
	var nss corev1.NamespaceList
	if err := c.call(ctx, token, http.MethodGet, "/api/v1/namespaces", nil, &nss); err != nil {
		if codeOf(err) == http.StatusUnauthorized {
			return err
		}
		v.NSNote = "You may not list namespaces; type one in."
	}
	for _, ns := range nss.Items {
		v.Namespaces = append(v.Namespaces, ns.Name)
	}
	sort.Strings(v.Namespaces)
	var svcs servingv1.ServiceList
	if err := c.call(ctx, token, http.MethodGet, "/apis/serving.knative.dev/v1/namespaces/"+v.Namespace+"/services", nil, &svcs); err != nil {
		if codeOf(err) != http.StatusForbidden {
			return err
		}
		// The page stays, with the namespace picker, so the user can
		// pick a namespace RBAC lets them read.
		v.Code, v.Error = http.StatusForbidden, err.Error()
		return nil
	}
	for i := range svcs.Items {
		v.Services = append(v.Services, serviceRowOf(&svcs.Items[i]))
	}
	sort.Slice(v.Services, func(i, j int) bool { return v.Services[i].Name < v.Services[j].Name })
	return nil
}

func serviceRowOf(s *servingv1.Service) serviceRow {
	row := serviceRow{Name: s.Name, Created: s.CreationTimestamp.Time, Generation: s.Generation,
		Latest: s.Status.LatestReadyRevisionName, Ready: "Unknown"}
	if s.Status.URL != nil {
		row.URL = s.Status.URL.String()
	}
	if cnd := s.Status.GetCondition(apis.ConditionReady); cnd != nil {
		row.Ready, row.Reason = string(cnd.Status), strings.TrimSpace(cnd.Reason+" "+cnd.Message)
	}
	return row
}

// service shows a Service, its traffic and its Revisions with their graphs.
func (c *Console) service(ctx context.Context, token, ns, name string, v *view) error {
	v.Template, v.Namespace, v.Title = "service", ns, name
	var svc servingv1.Service
	if err := c.call(ctx, token, http.MethodGet, "/apis/serving.knative.dev/v1/namespaces/"+ns+"/services/"+name, nil, &svc); err != nil {
		return err
	}
	row := serviceRowOf(&svc)
	v.Service = &row
	percent, tags := map[string]int64{}, map[string][]string{}
	for _, t := range svc.Status.Traffic {
		tr := trafficRow{Revision: t.RevisionName, Tag: t.Tag}
		if t.Percent != nil {
			tr.Percent = *t.Percent
		}
		if t.LatestRevision != nil {
			tr.Latest = *t.LatestRevision
		}
		if t.URL != nil {
			tr.URL = t.URL.String()
		}
		for _, prev := range v.Traffic {
			tr.Offset += prev.Percent
		}
		v.Traffic = append(v.Traffic, tr)
		percent[t.RevisionName] += tr.Percent
		if t.Tag != "" {
			tags[t.RevisionName] = append(tags[t.RevisionName], t.Tag)
		}
	}
	var revs servingv1.RevisionList
	sel := url.Values{"labelSelector": {serving.ServiceLabelKey + "=" + name}}
	if err := c.call(ctx, token, http.MethodGet, "/apis/serving.knative.dev/v1/namespaces/"+ns+"/revisions?"+sel.Encode(), nil, &revs); err != nil {
		return err
	}
	v.MetricsOK = c.canReadMetrics(ctx, token)
	names := map[string]bool{name: true}
	for _, rev := range revs.Items {
		names[rev.Name] = true
	}
	c.events(ctx, token, ns, names, v)
	sort.Slice(revs.Items, func(i, j int) bool {
		return revs.Items[i].CreationTimestamp.After(revs.Items[j].CreationTimestamp.Time) ||
			revs.Items[i].CreationTimestamp.Equal(&revs.Items[j].CreationTimestamp) && revs.Items[i].Name > revs.Items[j].Name
	})
	for i := range revs.Items {
		rev := &revs.Items[i]
		rr := revisionRow{Name: rev.Name, Created: rev.CreationTimestamp.Time, Percent: percent[rev.Name], Tags: tags[rev.Name], Ready: "Unknown"}
		if cnd := rev.Status.GetCondition(apis.ConditionReady); cnd != nil {
			rr.Ready, rr.Reason = string(cnd.Status), strings.TrimSpace(cnd.Reason+" "+cnd.Message)
		}
		if cs := rev.Spec.Containers; len(cs) > 0 {
			rr.Image = cs[0].Image
		}
		if v.MetricsOK {
			rr.Graphs = graphs(c.samples.series(ns, rev.Name))
		}
		v.Revisions = append(v.Revisions, rr)
	}
	return nil
}

// Log tails: the last maxLogBytes of the last logWindow.
const (
	maxLogBytes = 64 << 10
	logWindow   = 24 * time.Hour
)

// logTail shows the end of a Revision's logs.
func (c *Console) logTail(ctx context.Context, token, ns, name string, v *view) error {
	v.Template, v.Namespace, v.Revision, v.Title = "log", ns, name, name+" logs"
	q := url.Values{"sinceSeconds": {strconv.Itoa(int(logWindow / time.Second))}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/apis/serving.knative.dev/v1/namespaces/"+ns+"/revisions/"+name+"/log?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.RemoteAddr = remoteAddrFrom(ctx)
	w := &tail{h: http.Header{}, limit: maxLogBytes}
	c.opts.API.ServeHTTP(w, req)
	if w.code != 0 && (w.code < 200 || w.code > 299) {
		return statusError(w.code, w.buf)
	}
	b := w.buf
	if w.cut {
		// Start at a whole line.
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	v.Log, v.LogCut = strings.ToValidUTF8(string(b), "\uFFFD"), w.cut
	return nil
}

// maxEvents bounds the events a Service's page lists and reads.
const maxEvents = 20

// events lists the recent Events of the named objects and of their Pods
// (instances, named after their Revision), newest first. Where the API
// serves no Events the page has no events section.
func (c *Console) events(ctx context.Context, token, ns string, names map[string]bool, v *view) {
	// Discovery says whether the API serves Events at all.
	var rl metav1.APIResourceList
	if err := c.call(ctx, token, http.MethodGet, "/api/v1", nil, &rl); err != nil {
		return
	}
	served := false
	for _, r := range rl.APIResources {
		served = served || r.Name == "events"
	}
	if !served {
		return
	}
	var list corev1.EventList
	err := c.call(ctx, token, http.MethodGet, "/api/v1/namespaces/"+ns+"/events?limit=500", nil, &list)
	switch code := codeOf(err); {
	case err == nil:
		v.EventsServed = true
	case code == http.StatusNotFound:
		return
	case code == http.StatusForbidden:
		v.EventsNote = "You may not list events in this namespace."
		return
	default:
		v.EventsNote = "Events could not be read: " + err.Error()
		return
	}
	for _, e := range list.Items {
		o := e.InvolvedObject.Name
		owner := o
		if e.InvolvedObject.Kind == "Pod" {
			// An instance's Pod is named after its Revision, as Knative's
			// pods after their Deployment: <revision>-deployment-<suffix>.
			if i := strings.LastIndex(o, "-deployment-"); i > 0 {
				owner = o[:i]
			}
		}
		if !names[o] && !names[owner] {
			continue
		}
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.IsZero() {
			last = e.CreationTimestamp.Time
		}
		v.Events = append(v.Events, eventRow{Type: e.Type, Reason: e.Reason, Object: strings.ToLower(e.InvolvedObject.Kind) + "/" + o,
			Message: e.Message, Count: e.Count, Last: last})
	}
	sort.SliceStable(v.Events, func(i, j int) bool { return v.Events[i].Last.After(v.Events[j].Last) })
	if len(v.Events) > maxEvents {
		v.Events = v.Events[:maxEvents]
	}
}
