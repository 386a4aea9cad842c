// Package build runs Builds (build.knative.dev/v1alpha1): each Build's
// steps run as one Sequential pod of the pod runtime (package pod), one
// step after another, in the sandbox and with the isolation instances get
// (the handler of the Build's RuntimeClass, buildv1alpha1.RuntimeClassAnnotation,
// which admission defaults and checks as it does a Revision's, else knbox's
// default; the operator's seccomp profile, masked paths and limits; the
// steps' own resource limits), with an emptyDir "workspace" mounted at
// /workspace in every step, unpacked first from the uploaded source archive
// when the Build has source.upload (Sources, Controller.Upload), or cloned
// from its source.git with the pod's network view (git.go). It writes
// the Build's status: Succeeded Unknown while it runs, True at the end,
// False with the failing step's termination message (reason BuildFailed),
// BuildTimeout when the build ran past its timeout (it is stopped),
// BuildCannotRun when it could not start, GitCloneFailed when its git
// source could not be cloned, BuildInterrupted when knbox
// stopped while it ran; start and completion time; each step's state.
//
// The steps' output is kept in the log store, in the group BuildLogGroup of
// the Build's name, after the pod is gone, until the Build is deleted: the
// API serves it as the builds/NAME/log subresource (knbox logs --build).
//
// Builds are not resumed: a Build that was running when knbox stopped is
// marked BuildInterrupted at the next start (the pod runtime does not adopt
// Sequential pods; the revision manager stops what is left of them).
//
// A step reaches nothing of the host but the registries of
// Options.Registries, forwarded from the same loopback address inside its
// network namespace (see Forward). Every step finds knbox's embedded
// registry, as it reaches it, in RegistryEnv, and credentials for it in
// DOCKER_CONFIG (RegistryAccess).
//
// It must not import the API server, the store or the data plane; it
// talks to the API through client-go (a dynamic client for Builds,
// informers for what the steps read).
package build
