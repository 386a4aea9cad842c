package instance

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/knbox/knbox/pkg/controller"
)

func httpProbe(path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(0)}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
		TimeoutSeconds:   1,
	}
}

// TestLivenessRestarts: a failing liveness probe restarts the container
// (SIGTERM, then a fresh container in the same instance), which then is
// ready again.
func TestLivenessRestarts(t *testing.T) {
	for _, h := range handlerNames {
		t.Run(h, func(t *testing.T) {
			requireHandler(t, h)
			ref := runtimeInfoImage(t)
			e := newEnv(t, []string{h})
			name := uniqueName("live-" + h)
			rev := newRev(t, "ns1", name, h, ref, func(r *servingv1.Revision) {
				r.Spec.Containers[0].LivenessProbe = httpProbe("/healthz", 1, 2)
			})
			e.resolveAndEnsure(rev)
			e.waitState(rev, time.Minute, "ready", ready)
			eps := e.m.Endpoints("ns1", name)
			first := getInfo(t, eps[0])
			get(t, eps[0], "/fail-health")

			eventually(t, 20*time.Second, "restarted", func() bool {
				return strings.Contains(e.logs("ns1", name), "SIGTERM received")
			})
			st := e.waitState(rev, 20*time.Second, "ready again", ready)
			if st.Failed {
				t.Errorf("state %+v", st)
			}
			eps2 := e.m.Endpoints("ns1", name)
			if len(eps2) != 1 || eps2[0].ID != eps[0].ID {
				t.Fatalf("endpoints after the restart %v, want the same instance %s", endpointIDs(eps2), eps[0].ID)
			}
			second := getInfo(t, eps2[0])
			if !second.Started.After(first.Started) {
				t.Errorf("the container was not restarted: started %v, then %v", first.Started, second.Started)
			}
		})
	}
}

// TestReadinessHTTPProbe: an httpGet readiness probe that starts failing
// takes the instance out of Endpoints; the revision stays Ready.
func TestReadinessHTTPProbe(t *testing.T) {
	requireHandler(t, "runc")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"runc"})
	name := uniqueName("readyz")
	rev := newRev(t, "ns1", name, "runc", ref, func(r *servingv1.Revision) {
		r.Spec.Containers[0].ReadinessProbe = httpProbe("/healthz", 1, 2)
	})
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", ready)
	eps := e.m.Endpoints("ns1", name)
	get(t, eps[0], "/fail-health")
	st := e.waitState(rev, 20*time.Second, "not ready", func(st controller.RevisionState) bool { return st.Actual == 0 })
	if !st.Ready || st.Failed || len(e.m.Endpoints("ns1", name)) != 0 {
		t.Errorf("state %+v, endpoints %v: want the revision Ready without endpoints", st, endpointIDs(e.m.Endpoints("ns1", name)))
	}
}

// TestUnsupportedProbes: exec and grpc probes fail the revision, as the
// runtime contract wants.
func TestUnsupportedProbes(t *testing.T) {
	for _, p := range []*corev1.Probe{
		{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}},
		{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 8080}}},
	} {
		e := newEnv(t, []string{"process"})
		rev := newRev(t, "ns1", uniqueName("probe"), "process", "example.com/x@sha256:"+strings.Repeat("b", 64), func(r *servingv1.Revision) {
			r.Spec.Containers[0].LivenessProbe = p
		})
		st := e.waitState(rev, time.Second, "failed", failed)
		if st.Reason != ReasonUnsupportedProbe || !strings.Contains(st.Message, "livenessProbe") {
			t.Errorf("state %+v", st)
		}
	}
}

// TestH2CPort: a port named h2c is probed over HTTP/2 with prior knowledge
// and its endpoints say H2C.
func TestH2CPort(t *testing.T) {
	requireHandler(t, "process")
	ref := runtimeInfoImage(t)
	e := newEnv(t, []string{"process"})
	name := uniqueName("h2c")
	rev := newRev(t, "ns1", name, "process", ref, func(r *servingv1.Revision) {
		r.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "h2c", ContainerPort: 9090}}
		r.Spec.Containers[0].ReadinessProbe = httpProbe("/healthz", 0, 0)
	})
	e.resolveAndEnsure(rev)
	e.waitState(rev, time.Minute, "ready", ready)
	eps := e.m.Endpoints("ns1", name)
	if len(eps) != 1 || !eps[0].H2C {
		t.Fatalf("endpoints %+v, want one with H2C", eps)
	}
	if i := getInfo(t, eps[0]); i.Env["PORT"] != "9090" {
		t.Errorf("PORT %q", i.Env["PORT"])
	}
}
