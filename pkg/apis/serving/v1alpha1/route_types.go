package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

// Route names a split of traffic over Revisions and Configurations.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Route struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RouteSpec   `json:"spec,omitempty"`
	Status RouteStatus `json:"status,omitempty"`
}

// RouteSpec is the desired state of a Route.
type RouteSpec struct {
	Traffic []TrafficTarget `json:"traffic,omitempty"`
}

// TrafficTarget is one entry of a traffic split: exactly one of
// ConfigurationName and RevisionName, a percentage, and an optional name
// that makes the target reachable on its own as {name}.{domain}.
type TrafficTarget struct {
	// Name is the target's tag (v1's "tag").
	Name              string `json:"name,omitempty"`
	RevisionName      string `json:"revisionName,omitempty"`
	ConfigurationName string `json:"configurationName,omitempty"`
	Percent           *int64 `json:"percent,omitempty"`
	// URL is where a named target is reachable (status only).
	URL *apis.URL `json:"url,omitempty"`
}

// Addressable is the seed API's in-cluster address.
type Addressable struct {
	Hostname string `json:"hostname,omitempty"`
}

// RouteStatusFields are the status fields a Route shares with a Service.
type RouteStatusFields struct {
	// URL is the address of the Route (a knbox addition kept from v1).
	URL *apis.URL `json:"url,omitempty"`
	// Domain is the host of URL.
	Domain string `json:"domain,omitempty"`
	// DomainInternal is deprecated: see Address.Hostname.
	DomainInternal string `json:"domainInternal,omitempty"`
	// Address is the host that serves the Route from inside the machine.
	Address *Addressable `json:"address,omitempty"`
	// Traffic is the traffic split as it is served, with configurationName
	// targets resolved to Revisions.
	Traffic []TrafficTarget `json:"traffic,omitempty"`
}

// RouteStatus is the observed state of a Route.
type RouteStatus struct {
	duckv1.Status `json:",inline"`

	RouteStatusFields `json:",inline"`
}

// RouteList is a list of Routes.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type RouteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`

	Items []Route `json:"items"`
}
