package pod

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// Failure reasons, as the kubelet reports them.
const (
	// ReasonImagePullBackOff: an image could not be pulled; retried with
	// backoff.
	ReasonImagePullBackOff = "ImagePullBackOff"
	// ReasonCreateContainerConfig: what a container needs could not be
	// assembled (a spec the operator's policy refuses).
	ReasonCreateContainerConfig = "CreateContainerConfigError"
	// ReasonRunContainer: the runtime could not create or start a
	// container.
	ReasonRunContainer = "RunContainerError"
	// ReasonError: a container exited (Failure.ExitCode says how).
	ReasonError = "Error"
	// ReasonUnhealthy: the liveness probe failed and the containers were
	// restarted.
	ReasonUnhealthy = "Unhealthy"
	// ReasonSeedFailed: a volume's Seed.Fill failed (a build's git
	// source could not be cloned); the message says why.
	ReasonSeedFailed = "SeedFailed"
	// ReasonEvicted: the pod used more local storage than its limits
	// (ephemeral.go); it was killed and starts again, as a new pod would.
	ReasonEvicted = "Evicted"
)

// Status is what the runtime knows of a pod.
type Status struct {
	ID     string
	Labels map[string]string
	// Created is when Run accepted the pod (or, for a recovered pod, when
	// the earlier process did).
	Created time.Time
	// Pulling says an image is still to be pulled.
	Pulling bool
	// Running says every container runs.
	Running bool
	// Ready says the readiness probe passed (and has not failed since).
	Ready bool
	// Prepared says a pod made by Prepare is ready to start: its sandbox
	// is made and its containers are created (where the handler can),
	// waiting for Start.
	Prepared bool
	// Stopping says Stop was called.
	Stopping bool
	// Restarts counts how often the containers were started again.
	Restarts int
	// Failures counts failures (pulls, starts, exits, liveness) so far;
	// LastFailure is the latest of them.
	Failures    int
	LastFailure *Failure

	// Done says a Sequential pod has ended: every container exited 0
	// (Succeeded), or one failed or the pod was stopped (LastFailure).
	Done      bool
	Succeeded bool
	// Containers are a Sequential pod's containers' states, by index
	// (Waiting, Running, Terminated, as the kubelet reports them).
	Containers []corev1.ContainerState
}

// Failure is one failure of a pod.
type Failure struct {
	// Reason is one of the Reason constants.
	Reason string
	// Container is the container that failed ("" for the pod as a whole).
	Container string
	// ExitCode and OOMKilled say how a container ended (ReasonError,
	// ReasonUnhealthy).
	ExitCode  int
	OOMKilled bool
	// Message says why: the pull or runtime error, or the termination
	// message (the termination log, else the last lines of the output,
	// else the exit status).
	Message string
	At      time.Time
}

// same tells whether two statuses of one pod say the same (Labels do not
// change; a new failure is a new *Failure).
func (s Status) same(o Status) bool {
	return s.Pulling == o.Pulling && s.Running == o.Running && s.Ready == o.Ready && s.Stopping == o.Stopping &&
		s.Prepared == o.Prepared &&
		s.Restarts == o.Restarts && s.Failures == o.Failures && s.LastFailure == o.LastFailure &&
		s.Done == o.Done && s.Succeeded == o.Succeeded && equality.Semantic.DeepEqual(s.Containers, o.Containers)
}
