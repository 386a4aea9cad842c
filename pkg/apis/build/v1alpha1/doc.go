// Package v1alpha1 is the seed era's build API, build.knative.dev/v1alpha1:
// a Build is steps (containers) run in order in one workspace, a Succeeded
// condition that says how it ended, its start and completion times and
// each step's state. knbox serves it (package apiserver), runs it (package
// build) and lets a v1alpha1 Configuration or Revision wait for it
// (package controller, with the annotations of package
// apis/serving/v1alpha1).
//
// It owns the types, their defaults and their checks, nothing else: it
// must not import any knbox implementation package.
//
// # Decisions
//
//   - steps are containers with the fields a Revision's container has,
//     run as a kubelet runs init containers: one after another, each in a
//     fresh root filesystem, in one sandbox whose emptyDir "workspace" is
//     mounted at /workspace in every step (and is each step's working
//     directory unless it names one). A step's env holds plain values
//     (valueFrom and envFrom are refused); ports and probes are refused.
//   - volumes are emptyDir, secret and configMap volumes, which steps
//     mount by name; "workspace" and names starting with "knbox-" are
//     knbox's.
//   - source.upload: the build waits (Succeeded Unknown, reason
//     WaitingForSource) until a tar or tar.gz archive is PUT to the
//     builds/NAME/source subresource (at most builds.maxUploadBytes, else
//     413), then unpacks it into /workspace (bounded by
//     builds.maxSourceBytes and builds.maxSourceFiles, as safely as an
//     image layer) and runs the steps. One upload per Build, before it
//     starts (409 after).
//   - source.git {url, revision}: knbox clones url (http or https; no
//     credentials in it) into /workspace before the first step, with the
//     build's own network view (see package build), bounded by
//     builds.gitTimeout, builds.maxGitFetchBytes, builds.maxSourceBytes and
//     builds.maxSourceFiles. revision is what Knative Build's git source
//     took: a branch, a tag or a commit (7 to 40 hex digits), or a full ref
//     name; "" is the remote's HEAD (knative/build's git-init defaulted to
//     "master", the HEAD of its day). The workspace holds the revision's
//     files, not a .git directory. A clone that fails fails the Build with
//     reason GitCloneFailed and a message naming the URL and the error.
//   - timeout defaults to the operator's builds.defaultTimeout and may not
//     exceed builds.maxTimeout (pkg/config); the checks here only refuse a
//     timeout that is not positive.
//
// +k8s:deepcopy-gen=package
// +groupName=build.knative.dev
package v1alpha1

//go:generate sh -c "cd ../../../.. && go run k8s.io/code-generator/cmd/deepcopy-gen@v0.29.2 --input-dirs github.com/knbox/knbox/pkg/apis/build/v1alpha1 -O zz_generated.deepcopy --output-base . --trim-path-prefix github.com/knbox/knbox --go-header-file /dev/null"
