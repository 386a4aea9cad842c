package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

// Configuration holds the desired state of a workload; every change of its
// revisionTemplate stamps out a new Revision.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Configuration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ConfigurationSpec   `json:"spec,omitempty"`
	Status ConfigurationStatus `json:"status,omitempty"`
}

// ConfigurationSpec is the desired state of a Configuration.
type ConfigurationSpec struct {
	// Build is the build each new Revision gets: a build.knative.dev/v1alpha1
	// Build, or its spec alone (see the package documentation, Builds).
	Build *runtime.RawExtension `json:"build,omitempty"`

	// RevisionTemplate is copied into every new Revision.
	RevisionTemplate RevisionTemplateSpec `json:"revisionTemplate"`
}

// RevisionTemplateSpec is the metadata and spec of the Revisions a
// Configuration creates.
type RevisionTemplateSpec struct {
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec RevisionSpec `json:"spec,omitempty"`
}

// ConfigurationStatus is the observed state of a Configuration.
type ConfigurationStatus struct {
	duckv1.Status `json:",inline"`

	LatestReadyRevisionName   string `json:"latestReadyRevisionName,omitempty"`
	LatestCreatedRevisionName string `json:"latestCreatedRevisionName,omitempty"`
}

// ConfigurationList is a list of Configurations.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ConfigurationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`

	Items []Configuration `json:"items"`
}
