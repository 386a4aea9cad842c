// Package v1alpha1 is the seed API serving.knative.dev/v1alpha1: its types
// (Service with the runLatest, pinned, release and manual modes;
// Configuration with revisionTemplate; Revision with one container and
// concurrencyModel; Route), the checks of their shape, and their conversion
// to and from Knative's v1 types (knative.dev/serving/pkg/apis/serving/v1),
// which knbox stores. It owns nothing else: it must not import any knbox
// implementation package (apiserver, store, controllers, ...), only API
// packages, so that every part of knbox can use it.
//
// Knative Serving v0.42 no longer ships these types; they are defined here
// from the seed API spec, with its JSON field names.
//
// # Use
//
// On a write the caller runs Validate (shape checks, v1alpha1 paths), the
// ToV1 function, then Knative's v1 SetDefaults and Validate, and reports the
// v1 errors with FieldPathFromV1. On a read it runs the FromV1 function on
// the stored object. ObjectMeta is copied unchanged both ways except for the
// knbox annotations below; TypeMeta is set to the target version.
//
// # Revision and template
//
//   - container is v1's containers[0]. A v1 object with more than one
//     container, or with a PodSpec field not listed here, cannot be
//     expressed: RevisionFromV1 and ConfigurationFromV1 return an error that
//     names the field.
//   - Beyond the seed spec, a RevisionSpec carries the v1 fields a user of
//     knbox may need, with their v1 names: runtimeClassName (the runtime a
//     Revision runs in is knbox's point), securityContext (runAsUser of the
//     runtime contract), imagePullSecrets, enableServiceLinks (Knative
//     defaults it, so every stored Revision has it),
//     automountServiceAccountToken, responseStartTimeoutSeconds and
//     idleTimeoutSeconds. These are all the fields Knative's v1 accepts
//     without a feature flag, plus the two flagged ones knbox needs; the
//     other flagged ones (affinity, tolerations, initContainers, ...) mean
//     nothing on one machine.
//   - concurrencyModel Single means containerConcurrency 1: an unset
//     containerConcurrency becomes 1 in v1, any other explicit value is an
//     error. Multi leaves containerConcurrency as it is (unset: the system
//     decides); Multi with containerConcurrency 1 is an error too, as a
//     contradiction. The model is kept in the annotation
//     serving.knbox.dev/v1alpha1-concurrency-model of the v1 object (the
//     template's metadata for a Configuration or Service) and servingState
//     in serving.knbox.dev/v1alpha1-serving-state; FromV1 turns them back
//     into fields and removes them. As Single implies 1, {Single,
//     containerConcurrency: 1} reads back as {Single}. A recorded model that
//     a v1 client has since contradicted (say Single, then
//     containerConcurrency 5) no longer describes the Revision: FromV1 drops
//     it. What a v1alpha1 client writes in these annotations is ignored.
//   - buildName, buildRef and a Configuration's build: see Builds.
//   - Status: logUrl and conditions map one to one; imageDigest is the
//     digest of the container's v1 containerStatuses entry. serviceName (the
//     Kubernetes Service in front of a Revision) is left empty: knbox has
//     none. v1's replica counts are not shown.
//
// # Builds
//
// A Configuration's build is a build.knative.dev/v1alpha1 Build (or, as
// the seed API allows, its spec alone); it is checked with Build's own
// checks and kept, as canonical JSON of a Build (labels, annotations and
// spec), in the annotation serving.knbox.dev/v1alpha1-build of the v1
// template, so every Revision stamped from it carries it and a change of
// the build alone stamps a new Revision. buildRef (a Build of the
// Revision's namespace, apiVersion and kind defaulted) and the deprecated
// buildName are the annotations serving.knbox.dev/v1alpha1-build-ref (JSON
// of the reference) and serving.knbox.dev/v1alpha1-build-name. FromV1
// turns them back into fields; a v1 Revision with an inline build shows its
// own Build (named after it) as buildRef. Knative's v1 has no build: the
// annotations keep a v1 object valid for Knative, and a v1 client writes
// them to say the same (RevisionBuild reads them). A Revision that waits
// for a Build reports RevisionConditionBuildSucceeded.
//
// Only Build of build.knative.dev/v1alpha1 is built ("any kubernetes
// resource that completes with a Succeeded condition" in the seed spec):
// another kind is refused with a message that says so.
//
// # Route
//
// A traffic target's name is v1's tag; revisionName, configurationName,
// percent and url are copied. v1's latestRevision is not written: v1
// defaulting derives it exactly as the seed API means it (true when there is
// no revisionName), so the objects compare equal once defaulted. A stored
// spec target whose latestRevision contradicts that cannot be expressed.
//
// # Service
//
// ServiceToV1 makes the template from configuration.revisionTemplate and the
// traffic from the mode, and records the mode in the annotation
// serving.knbox.dev/v1alpha1-mode of the v1 Service:
//
//	runLatest          [{latestRevision: true, percent: 100}]
//	pinned X           [{revisionName: X, percent: 100}]
//	release [A]        [{tag: current, revisionName: A, percent: 100},
//	                    {tag: latest, latestRevision: true, percent: 0}]
//	release [A, B], p  [{tag: current, revisionName: A, percent: 100-p},
//	                    {tag: candidate, revisionName: B, percent: p},
//	                    {tag: latest, latestRevision: true, percent: 0}]
//
// "@latest" in release.revisions gives that target latestRevision: true
// instead of a revisionName (pinned to "@latest" is refused: that is
// runLatest). Revision targets leave latestRevision to v1 defaulting, as in
// a Route. manual keeps the stored spec (template and
// traffic) as it is and tells the Service controller, through the mode
// annotation, to stop managing the Route and the Configuration; a Service
// must exist before it can be manual. Writing any other mode replaces the
// annotation and ends manual management.
//
// ServiceFromV1 shows a Service whose mode annotation says manual as manual.
// Otherwise it infers the mode from the traffic (after v1 defaulting, so a
// stored Service and the ToV1 output read the same): one untagged 100%
// target following the latest Revision is runLatest, one untagged 100%
// target naming a Revision is pinned, the shapes above are release. It
// keeps the inferred spec only if it converts back to the same v1 spec (up
// to v1's defaulting of the traffic).
//
// Any other v1 Service (a v1 client wrote its own tags, or a template the
// seed API cannot express) is shown as manual, with its v1 spec.traffic as
// JSON in the annotation serving.knbox.dev/v1-traffic and no mode
// annotation. That is the honest description in seed terms: its routing is
// managed by hand, in v1 terms. Written back, manual with that annotation
// restores exactly that traffic (and the template from the stored object),
// drops the annotation and sets no mode, so the v1 object is unchanged.
//
// Status, both ways: v1 status.url is kept as url and its host is domain;
// the host of v1 status.address.url is address.hostname and domainInternal;
// status traffic maps as in a Route. Going to v1, url (or else
// http://domain) and address.hostname (or else domainInternal) win; v1's
// latestRevision of status targets and the rest of address are not shown.
//
// +k8s:deepcopy-gen=package
// +groupName=serving.knative.dev
package v1alpha1

//go:generate sh -c "cd ../../../.. && go run k8s.io/code-generator/cmd/deepcopy-gen@v0.29.2 --input-dirs github.com/knbox/knbox/pkg/apis/serving/v1alpha1 -O zz_generated.deepcopy --output-base . --trim-path-prefix github.com/knbox/knbox --go-header-file /dev/null"
