package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

// Service manages a Configuration and a Route for one workload. Its spec
// says, in one of four modes, how the Route follows the Configuration.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Service struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServiceSpec   `json:"spec,omitempty"`
	Status ServiceStatus `json:"status,omitempty"`
}

// ServiceSpec holds exactly one of the four rollout modes.
type ServiceSpec struct {
	// RunLatest routes all traffic to the latest ready Revision.
	RunLatest *RunLatestMode `json:"runLatest,omitempty"`
	// Pinned routes all traffic to one named Revision (deprecated in the
	// seed API in favour of Release, still accepted).
	Pinned *PinnedMode `json:"pinned,omitempty"`
	// Release splits traffic between a "current" and a "candidate" Revision.
	Release *ReleaseMode `json:"release,omitempty"`
	// Manual stops the Service from managing its Route and Configuration.
	Manual *ManualMode `json:"manual,omitempty"`
}

// RunLatestMode is the runLatest rollout mode.
type RunLatestMode struct {
	Configuration ConfigurationSpec `json:"configuration"`
}

// PinnedMode is the pinned rollout mode.
type PinnedMode struct {
	RevisionName  string            `json:"revisionName,omitempty"`
	Configuration ConfigurationSpec `json:"configuration"`
}

// ReleaseMode is the release rollout mode.
type ReleaseMode struct {
	// Revisions lists one or two Revision names: "current" and, optionally,
	// "candidate". LatestRevisionName stands for the latest ready Revision.
	Revisions []string `json:"revisions,omitempty"`
	// RolloutPercent is the percentage (0-99) of traffic sent to the
	// candidate; it needs two revisions.
	RolloutPercent int               `json:"rolloutPercent,omitempty"`
	Configuration  ConfigurationSpec `json:"configuration"`
}

// LatestRevisionName is the name that, in ReleaseMode.Revisions, means the
// latest ready Revision of the Service's Configuration.
const LatestRevisionName = "@latest"

// ManualMode is the manual rollout mode: it has no fields.
type ManualMode struct{}

// ServiceStatus is the observed state of a Service, copied from its
// Configuration and Route.
type ServiceStatus struct {
	duckv1.Status `json:",inline"`

	LatestReadyRevisionName   string `json:"latestReadyRevisionName,omitempty"`
	LatestCreatedRevisionName string `json:"latestCreatedRevisionName,omitempty"`

	RouteStatusFields `json:",inline"`
}

// ServiceList is a list of Services.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`

	Items []Service `json:"items"`
}
