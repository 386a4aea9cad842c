package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

// Build is steps run in order in one workspace; it completes with a
// Succeeded condition.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Build struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BuildSpec   `json:"spec,omitempty"`
	Status BuildStatus `json:"status,omitempty"`
}

// BuildSpec is what a Build runs.
type BuildSpec struct {
	// Source is where the workspace's content comes from before the first
	// step: a git repository or an upload (see the package documentation).
	Source *SourceSpec `json:"source,omitempty"`
	// Steps are the containers run in order; each must exit 0 for the
	// next to start.
	Steps []corev1.Container `json:"steps,omitempty"`
	// Volumes are the volumes steps may mount besides the workspace.
	Volumes []corev1.Volume `json:"volumes,omitempty"`
	// ServiceAccountName is the ServiceAccount whose imagePullSecrets pull
	// the steps' images ("" is "default").
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// Timeout bounds the whole build (default: the operator's
	// builds.defaultTimeout). A build past it is stopped and fails with
	// reason BuildTimeout.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// SourceSpec is the source of a build: exactly one of its fields.
type SourceSpec struct {
	// Git is a repository to clone into the workspace (see the package
	// documentation).
	Git *GitSourceSpec `json:"git,omitempty"`
	// Upload is an archive uploaded to the Build's source subresource.
	Upload *UploadSourceSpec `json:"upload,omitempty"`
}

// UploadSourceSpec says the build waits for a tar or tar.gz archive PUT to
// builds/NAME/source, unpacked into /workspace before the first step.
type UploadSourceSpec struct{}

// GitSourceSpec is a git repository and revision.
type GitSourceSpec struct {
	// URL is the repository, http or https.
	URL string `json:"url"`
	// Revision is a branch, tag, commit or full ref name ("": the
	// remote's HEAD).
	Revision string `json:"revision,omitempty"`
}

// BuildStatus is how a Build went.
type BuildStatus struct {
	duckv1.Status `json:",inline"`

	// StartTime is when the build's first step was asked to run.
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the build ended, either way.
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// StepStates are the steps' states, by index.
	StepStates []corev1.ContainerState `json:"stepStates,omitempty"`
	// StepsCompleted names the steps that exited 0, in order.
	StepsCompleted []string `json:"stepsCompleted,omitempty"`
	// PodName is the sandbox the steps run in, whose log holds their
	// output (`knbox logs --build NAME`).
	PodName string `json:"podName,omitempty"`
}

// BuildList is a list of Builds.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type BuildList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`

	Items []Build `json:"items"`
}

// RuntimeClassAnnotation names the RuntimeClass whose handler runs a
// Build's steps (knative/build had no such field). Admission sets it to the
// namespace's default RuntimeClass when it is absent and refuses a class the
// namespace may not use, as for a Revision's runtimeClassName; without it
// (no namespace default) the server's default applies.
const RuntimeClassAnnotation = "build.knbox.dev/runtime-class-name"

// BuildSucceeded is the condition of a finished build (the Succeeded of
// the seed era's errors.md): Unknown while it runs.
const BuildSucceeded = apis.ConditionSucceeded

// Reasons of the Succeeded condition.
const (
	// ReasonBuilding: a step runs, or the build waits to start.
	ReasonBuilding = "Building"
	// ReasonBuildTimeout: the build ran past its timeout and was stopped.
	ReasonBuildTimeout = "BuildTimeout"
	// ReasonBuildFailed: a step failed; the message is its termination
	// message.
	ReasonBuildFailed = "BuildFailed"
	// ReasonBuildInterrupted: knbox stopped (or restarted) while the build
	// ran; a build is not resumed.
	ReasonBuildInterrupted = "BuildInterrupted"
	// ReasonBuildCannotRun: the build could not start (an image that
	// cannot be pulled, an unknown runtime, a missing Secret, ...).
	ReasonBuildCannotRun = "BuildCannotRun"
	// ReasonWaitingForSource: the build waits for its source upload.
	ReasonWaitingForSource = "WaitingForSource"
)

var condSet = apis.NewBatchConditionSet()

// GetConditionSet is the Build's condition set: Succeeded alone.
func (*Build) GetConditionSet() apis.ConditionSet { return condSet }

// GetCondition returns the condition of type t.
func (s *BuildStatus) GetCondition(t apis.ConditionType) *apis.Condition {
	return condSet.Manage(s).GetCondition(t)
}

// Succeeded returns the Succeeded condition (nil before the build started).
func (s *BuildStatus) Succeeded() *apis.Condition { return s.GetCondition(BuildSucceeded) }

// InitializeConditions sets Succeeded Unknown if it is not set.
func (s *BuildStatus) InitializeConditions() { condSet.Manage(s).InitializeConditions() }

// MarkRunning sets Succeeded Unknown with a reason and message.
func (s *BuildStatus) MarkRunning(reason, message string) {
	condSet.Manage(s).MarkUnknown(BuildSucceeded, reason, "%s", message)
}

// MarkFailed sets Succeeded False.
func (s *BuildStatus) MarkFailed(reason, message string) {
	condSet.Manage(s).MarkFalse(BuildSucceeded, reason, "%s", message)
}

// MarkSucceeded sets Succeeded True.
func (s *BuildStatus) MarkSucceeded() { condSet.Manage(s).MarkTrue(BuildSucceeded) }

// IsDone tells whether the build has ended (Succeeded True or False).
func (s *BuildStatus) IsDone() bool {
	c := s.Succeeded()
	return c != nil && !c.IsUnknown()
}
