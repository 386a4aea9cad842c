// Package instance runs each Revision as a set of instances: it resolves and
// pulls the images, prepares each instance (network namespace, log files,
// syslog socket, and per container an overlay root filesystem, an OCI
// bundle per the runtime contract and a termination log), starts its
// containers with the handler its RuntimeClass names,
// probes it, restarts it with backoff when it crashes, stops it in order
// (drain, SIGTERM, grace, SIGKILL), and tells the Revision reconciler
// (controller.Runtime) and the router (router.Instances) what it knows.
//
// It must not import the API server or the store: Secrets and ConfigMaps
// come through the Lookup interface, RuntimeClasses through a function.
//
// # Revisions
//
// Ensure starts a revision's loop, which pulls the digests that Resolve
// returned (the revision's status.containerStatuses[i].imageDigest, one per
// container, in their order) once and keeps the number of instances at the wanted scale: one until SetScale (the
// autoscaler) first speaks, then what it last said; at least one after
// Activate (the router's scale from zero); and at least one until the
// revision has been ready once, so that every new revision starts one
// instance even without traffic (the deployment probe). A revision whose
// status says it was ready before this Manager saw it (the daemon restarted)
// has passed its deployment probe and waits for SetScale or Activate. A
// revision is Ready once one instance has passed its readiness probe; it
// stays Ready when scaled to zero (Active false).
//
// Failures are reported as Knative reports them: an image that cannot be
// pulled is retried with backoff and reported as ImagePullBackOff; a
// RuntimeClass or handler that does not exist as RuntimeClassNotFound or
// RuntimeHandlerNotFound (resources failed); a container that cannot be
// created as CreateContainerConfigError (a Secret missing, a spec the
// operator's policy refuses) or RunContainerError (the runtime failed, with
// the handler's name and its message); a container that exits before the
// revision was ever ready as ExitCode<N> with its termination message; and a
// revision that is not ready within the progress deadline as
// ProgressDeadlineExceeded, after which its instances are stopped until the
// router activates it again.
//
// # Instances
//
// Each instance has a directory StateDir/instances/<id> (id is
// "<revision>-<8 random characters>") holding instance.json (written first,
// so that Recover knows what to remove), the bundle's config.json, the
// overlay (rootfs, upper, work), the files bind-mounted into the container
// (/etc/hosts, /etc/hostname, /etc/resolv.conf, the termination log, the
// /dev/log socket) and the Secret, ConfigMap and emptyDir volumes. Its
// network namespace is created by package network; the router and the
// probes dial 127.0.0.1:$PORT inside it.
//
// The environment is PORT (the containerPort, default 8080; the serving
// container's only, as Knative gives it), K_SERVICE, K_CONFIGURATION and
// K_REVISION, then envFrom, then env, with valueFrom of Secrets,
// ConfigMaps, fieldRef and resourceFieldRef resolved. A missing Secret or
// ConfigMap that is not optional keeps the instance from starting.
//
// # Several containers
//
// A revision with sidecars (Knative's multi-container) runs them all in each
// instance: the serving container is the one with the port, and the others
// share its network namespace (127.0.0.1), /etc/hosts, /etc/hostname,
// /etc/resolv.conf, /dev/log and volumes, each with its own image, root
// filesystem, bundle (containers/<name> in the instance's directory),
// termination log, cgroup, resources and securityContext. A sidecar's
// container id is "<name>_<instance>", so Recover finds sidecars by their
// instance. Readiness and liveness are the serving container's; sidecars'
// probes are ignored (Knative uses them only under multi-container-probing,
// off by default). The process handler runs one container per instance and
// fails such a revision (MultiContainerUnsupported).
//
// A container that exits is deleted and started again in the same instance
// (same namespace, a fresh root filesystem) after a backoff that doubles
// from 200ms to at most 10s, and starts afresh after a run of 10s. A
// liveness probe that fails failureThreshold times in a row restarts it the
// same way. With several containers, the whole instance restarts when any
// one of them exits (the others get SIGTERM, the grace period, SIGKILL),
// where the kubelet would restart that container alone: one restart path
// and one backoff for the instance, at the price of restarting containers
// that did not fail. The failure on the revision names the container.
//
// Readiness is probed every 25ms from the start (after initialDelaySeconds)
// until the first success, so that the probe adds little to a cold start,
// then every periodSeconds (1s when unset). Probes are tcpSocket or httpGet;
// exec and grpc probes fail the revision, as the runtime contract wants.
//
// Stopping an instance (scale down, Remove, Close): it leaves Endpoints at
// once; if the router may have requests on it (Endpoints returned it), the
// stop waits for Drained or at most the revision's timeoutSeconds; then
// SIGTERM to every container, then SIGKILL after a grace period of
// timeoutSeconds (as Knative sets terminationGracePeriodSeconds). Its container, mounts, namespace and
// directory are removed; its log is kept.
//
// # Logs
//
// stdout, stderr and what the containers send to /dev/log go to
// StateDir/logs/<namespace>/<revision>/<instance>.log in the CRI log format
// (time, stream, F or P for a partial line, message; with several
// containers, each line of a container's output starts with its name in
// brackets, "[sidecar] ..."), rotated at 10 MiB with
// one older file kept. The logs of the last 10 stopped instances of a
// revision are kept; Remove deletes them all. Logs merges them by time.
//
// # Wiring
//
// The daemon makes one Manager, calls Recover, and hands it to the
// controller (controller.Runtime), the router (router.Instances) and the
// autoscaler's hooks (Ready and SetScale); Close stops everything. The
// image cache's prune keeps at least ImagesInUse (the daemon keeps the
// digest of every Revision in the API, a superset that also covers
// revisions this Manager has not seen since a restart).
//
// # Runtimes
//
// The process handler applies none of the spec's mounts: its instances have
// no /dev/log, /dev/termination-log or tmpfs /tmp (see package runtime).
// runsc needs --host-uds=open for /dev/log, and its handler manages the
// cgroups (runtime.OCIConfig.ManageCgroups): runsc 20221219 enforces the
// memory and CPU limits on its sandbox's host cgroups but removes them when
// the sandbox exits and shows the container none, so the handler makes them
// (an OOM kill is then reported like runc's) and bind-mounts them read-only
// at /sys/fs/cgroup/memory and /sys/fs/cgroup/cpu.
//
// # Goroutines
//
// Every goroutine is owned: the Manager owns one loop per revision, each
// revision owns one goroutine per instance, and each instance owns the
// goroutines that wait for its containers' exits, probe the serving one
// and read its syslog socket. All of them end when their owner's context ends; Close
// stops every instance in order and then cancels that context.
package instance
