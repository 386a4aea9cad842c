package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

// Revision is an immutable snapshot of a Configuration's template.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Revision struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RevisionSpec   `json:"spec,omitempty"`
	Status RevisionStatus `json:"status,omitempty"`
}

// ConcurrencyModel is the seed API's concurrency strategy, deprecated in
// favour of containerConcurrency.
type ConcurrencyModel string

const (
	// ConcurrencyModelSingle allows one request at a time per instance
	// (containerConcurrency 1).
	ConcurrencyModelSingle ConcurrencyModel = "Single"
	// ConcurrencyModelMulti allows concurrent requests per instance.
	ConcurrencyModelMulti ConcurrencyModel = "Multi"
)

// ServingState is the seed API's deprecated readiness level of a Revision.
// knbox accepts and keeps it but does not act on it.
type ServingState string

const (
	// ServingStateActive is the Active serving state.
	ServingStateActive ServingState = "Active"
	// ServingStateReserve is the Reserve serving state.
	ServingStateReserve ServingState = "Reserve"
	// ServingStateRetired is the Retired serving state.
	ServingStateRetired ServingState = "Retired"
)

// RevisionSpec is the desired state of a Revision: one container and how it
// runs. The fields after TimeoutSeconds are knbox's additions to the seed API
// (see the package documentation); each is the v1 field of the same name.
type RevisionSpec struct {
	// BuildName is deprecated in the seed API in favour of BuildRef: the
	// name of a Build the Revision waits for.
	BuildName string `json:"buildName,omitempty"`
	// BuildRef is a build.knative.dev/v1alpha1 Build of the Revision's
	// namespace the Revision waits for before it runs its image.
	BuildRef *corev1.ObjectReference `json:"buildRef,omitempty"`

	// Container is the one container of the Revision.
	Container *corev1.Container `json:"container,omitempty"`
	// Volumes are the volumes the container may mount.
	Volumes []corev1.Volume `json:"volumes,omitempty"`
	// ServiceAccountName is the service account the code runs as.
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// ServingState is deprecated; accepted and kept, not acted on.
	ServingState ServingState `json:"servingState,omitempty"`

	// ContainerConcurrency is the maximum number of requests in flight per
	// instance; 0 lets the system decide.
	ContainerConcurrency *int64 `json:"containerConcurrency,omitempty"`
	// ConcurrencyModel is deprecated in favour of ContainerConcurrency.
	ConcurrencyModel ConcurrencyModel `json:"concurrencyModel,omitempty"`

	// TimeoutSeconds is the maximum duration of a request.
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`

	// ResponseStartTimeoutSeconds is v1's responseStartTimeoutSeconds.
	ResponseStartTimeoutSeconds *int64 `json:"responseStartTimeoutSeconds,omitempty"`
	// IdleTimeoutSeconds is v1's idleTimeoutSeconds.
	IdleTimeoutSeconds *int64 `json:"idleTimeoutSeconds,omitempty"`

	// RuntimeClassName names the RuntimeClass whose handler runs the
	// container (runc, runsc, ...).
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`
	// ImagePullSecrets name the Secrets used to pull the image.
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// SecurityContext is the pod-level security context.
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`
	// EnableServiceLinks is v1's enableServiceLinks (Knative defaults it).
	EnableServiceLinks *bool `json:"enableServiceLinks,omitempty"`
	// AutomountServiceAccountToken is v1's automountServiceAccountToken.
	AutomountServiceAccountToken *bool `json:"automountServiceAccountToken,omitempty"`
}

// RevisionStatus is the observed state of a Revision.
type RevisionStatus struct {
	duckv1.Status `json:",inline"`

	// LogURL is where the Revision's logs can be read.
	LogURL string `json:"logUrl,omitempty"`
	// ServiceName is the seed API's name of the Kubernetes Service in front
	// of the Revision. knbox has none and leaves it empty.
	ServiceName string `json:"serviceName,omitempty"`
	// ImageDigest is the container's image resolved to a digest.
	ImageDigest string `json:"imageDigest,omitempty"`
}

// RevisionList is a list of Revisions.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type RevisionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`

	Items []Revision `json:"items"`
}
