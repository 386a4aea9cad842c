// Package replicas is knbox's revision manager, the replica controller of
// the runtime side: it keeps each Knative Revision's instances (pods of
// package pod) at the autoscaler's desired scale, and says how the
// Revision is doing.
//
// It turns a Revision into fully resolved pod specs: the handler from its
// RuntimeClass, each container's environment (PORT, K_SERVICE,
// K_CONFIGURATION, K_REVISION, then envFrom, then env with valueFrom of
// Secrets, ConfigMaps, fieldRef and resourceFieldRef resolved), its Secret,
// ConfigMap and projected volumes read into files (a projected
// serviceAccountToken source gets a token of the Revision's ServiceAccount,
// "default" if it names none, from Options.Tokens, issued for each instance
// and rewritten in place after 80% of its lifetime or 24 hours, as the
// kubelet does; a refresh that fails keeps the old token and is tried again
// in 10s), its image pull secrets
// (its own and its ServiceAccount's), its probes defaulted (a TCP probe of
// the port) and the serving container picked (the one with the port).
//
// It must not import the controllers, the router, the API server or the
// store: the Revision reconciler calls Ensure, Remove and Resolve and
// subscribes to state changes; the router reads Config and Endpoints and
// calls Drained; the daemon adapts the types. Secrets, ConfigMaps,
// RuntimeClasses and ServiceAccounts come from a shared informer factory,
// never from requests to the API: Ensure does no I/O, no lock is held
// across I/O, and an informer's change event rewrites the volumes of
// running instances that read the changed object (within the event's
// delivery: no polling) and retries what could not be made.
//
// # Scale
//
// The autoscaler (Options.Scale) is the one source of scale: the Manager
// reads its desired scale, and runs that many instances; at least one
// until the Revision has been ready once, so that every new Revision
// starts one instance even without traffic (the deployment probe), and one
// while the autoscaler has not decided yet. A revision whose status says
// it was ready before this Manager saw it (the daemon restarted) has
// passed its deployment probe and runs what the autoscaler says. The
// router only pokes (Poke): a revision that failed its progress deadline
// gets another attempt; the autoscaler, poked as well, scales it from
// zero. A Revision is Ready once one instance has passed its readiness
// probe; it stays Ready when scaled to zero.
//
// # Quota
//
// With Options.Quota (the namespaces' quota ledger), every instance
// reserves its resources before it is run, with the namespace's LimitRange
// defaults (which it then runs with), and releases them when it has
// stopped; instances adopted after a restart are tracked without a check.
// A scale-up that would cross a ResourceQuota is held: the instance is not
// made, and the state says so with reason ExceededQuota and the quota's
// text (quota, resources, used, requested, hard): as HeldReason and
// HeldMessage while instances are ready, as a resources failure while none
// is. It is tried again with the backoff below, and at once when an
// instance of the namespace stops or a ResourceQuota changes. The ledger is
// called without the Manager's locks held.
//
// # Failures
//
// Failures are reported as Knative reports them, while no instance is
// ready: an image that cannot be pulled as ImagePullBackOff; a
// RuntimeClass or handler that does not exist as RuntimeClassNotFound or
// RuntimeHandlerNotFound (resources failed; tried again when a
// RuntimeClass changes); a container that cannot be created as
// CreateContainerConfigError (a Secret missing, a spec the operator's
// policy refuses) or RunContainerError (the runtime failed, with the
// handler's name and its message); a container that exits as ExitCode<N>
// with its termination message ("container <name>: ..." in a revision
// with sidecars); and a revision that is not ready within the progress
// deadline as ProgressDeadlineExceeded, after which its instances are
// stopped until a request pokes it. Nothing transient becomes permanent:
// what could not be made is tried again with backoff (200ms doubling to
// 10s) and at once when an object it reads changes.
//
// # Instances
//
// An instance is named "<revision>-<8 random characters>" (the revision
// part cut to 40), as a Deployment's pods are. Stopping one (scale down,
// Remove, Close): it leaves Endpoints at once; if the router may have
// requests on it (Endpoints returned it), the stop waits for Drained or at
// most the revision's timeoutSeconds; then the pod runtime stops it with a
// grace period of timeoutSeconds (as Knative sets
// terminationGracePeriodSeconds). Scale down stops instances that are not
// ready first, then the newest.
//
// # Pods
//
// Pods, Pod and SubscribePods show the instances as the core/v1 Pods
// Knative's Deployment would make (named after the instance, with the
// revision's labels, serving.knative.dev/revision and revisionUID, app,
// owned by the Revision, with phase, conditions and container statuses
// from the pod runtime: every container shares the instance's restart
// count, since an instance restarts as a whole); the API server mirrors
// them. DeletePod stops one instance as a scale-down does and the
// revision replaces it, as a ReplicaSet replaces a deleted pod. OwnerGone
// stops one whose Revision is gone (the garbage collector deletes its
// Pods): nothing replaces it, and the revision is retired at once.
//
// # Removal
//
// Retire (the Revision reconciler's Remove) does not wait: the revision
// makes no more instances, those it has stop in order in the background
// (shown as Terminating Pods) and its logs go when they are gone. Its name
// is free at once: a Revision of the same name (another UID) runs beside
// the old instances that stop.
//
// # Logs
//
// Each instance's output goes to the log store (package logs) as group
// <namespace>/<revision>: the API's log subresource reads it there. The
// logs of the last 10 stopped instances of a revision are kept; Retire
// deletes them all (only the retired revision's, when a revision of the
// same name runs already).
package replicas
