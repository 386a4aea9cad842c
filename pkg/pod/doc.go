// Package pod is knbox's pod runtime, the part of a kubelet that runs pods
// through CRI: it runs a fully resolved pod [Spec] (containers with plain
// environment values, volumes as files, a handler name, probes) and keeps
// it running until it is stopped.
//
// For each pod it pulls the images (cached by digest in package image),
// makes the sandbox (a directory, a network namespace, optionally attached
// to the egress bridge, /etc/hosts, /etc/hostname, /etc/resolv.conf, a
// /dev/log socket, the volumes), and per container an overlay root
// filesystem, a termination log and an OCI bundle per the runtime contract
// (package oci), and starts the containers with the handler (package
// runtime). It probes the serving container (readiness: at once, then
// after 1ms doubling to every 25ms until the first success, then every
// periodSeconds; liveness), restarts the
// containers with backoff when one exits or the liveness probe fails, and
// stops a pod with a grace period (SIGTERM, grace, SIGKILL). The
// containers' stdout and stderr and what they send to /dev/log go to the
// pod's log file in the CRI format (package logs).
//
// It must not import Knative's types, the API's clients, the controllers,
// the router or the autoscaler: what to run comes in the Spec, what
// happened goes out through Status, Subscribe (the status stream)
// and Options.Events (kubelet-like events). test/deps keeps it so.
//
// # Interface
//
// Run, Stop, Status and Recover, ctx first, as a CRI runtime's
// RunPodSandbox/CreateContainer/StartContainer, StopPodSandbox and
// PodSandboxStatus; UpdateVolume replaces a files volume's content (the
// kubelet's volume manager for Secret and ConfigMap volumes); Dial reaches
// the serving port inside the pod's network namespace.
//
// # Pods
//
// Each pod has a directory StateDir/<id> holding pod.json (its spec without
// secrets, written first, so that Recover knows what the pod was), the
// serving container's bundle (config.json, overlay: rootfs, upper, work,
// termlog/termination-log on a 4096-byte tmpfs), the files bind-mounted
// into every container (hosts, hostname, resolv.conf, the log.sock
// /dev/log socket), the volumes
// (volumes/<index>) and each sidecar's bundle (containers/<name>); and in
// each bundle "pinned", where package safemount bind-mounts every host path
// the container's spec names (volumes, subPaths, the files above, the
// termination log) before the runtime sees it, so that no container can
// redirect one (a subPath swapped for a link to a host directory); it is
// released when the container is torn down, and by Recover after a crash
// with everything else mounted below the pod's directory. A
// sidecar's container id is "<name>_<pod>"; the serving container's is the
// pod's id. The network namespace is named after the pod (package network);
// Dial and the probes reach 127.0.0.1:<port> inside it.
//
// A pod's containers start in the spec's order without waiting for one
// another. A container that exits, or a serving container whose liveness
// probe fails failureThreshold times in a row, ends all the pod's
// containers (SIGTERM, the spec's grace period, SIGKILL) and they start
// again in the same sandbox (same network namespace and volumes, fresh root
// filesystems) after a backoff that doubles from 200ms to at most 10s, and
// starts afresh after a run of 10s. The kubelet would restart the one
// container alone: one restart path and one backoff per pod, at the price
// of restarting containers that did not fail.
//
// Failures are kept in Status with the kubelet's reasons: ImagePullBackOff
// (retried with the same backoff), CreateContainerConfigError (a spec the
// operator's policy refuses), RunContainerError (the handler failed: its
// name and message), Error (a container exited: its exit code, OOMKilled
// and termination message: the termination log, else the last lines of its
// output, else its exit status) and Unhealthy (liveness). The pod's log
// also gets a line of knbox's own for every exit ("knbox: the container
// exited (exit code 3): ...").
//
// Files volumes are laid out as the kubelet lays out Secret and ConfigMap
// volumes: each name is a symlink through ..data, which is swapped
// atomically by UpdateVolume, so a reader sees the old files or the new
// ones. subPath mounts of them do not change.
//
// Pods' local storage (writable layers, emptyDirs) is measured and
// limited as the kubelet's eviction manager does: a pod over its limits is
// evicted (ReasonEvicted) and starts again afresh; see ephemeral.go.
//
// # Runtimes
//
// The process handler applies none of the spec's mounts: its pods have no
// /dev/log, /dev/termination-log or tmpfs /tmp, and it runs one container
// per pod (see package runtime). runsc needs --host-uds=open for /dev/log,
// and its handler manages the cgroups (runtime.OCIConfig.ManageCgroups).
//
// # Goroutines
//
// Every goroutine is owned: the Runtime owns one per pod, and each pod owns
// the goroutines that wait for its containers' exits, probe the serving
// one and read its /dev/log socket. All end when their owner's context
// ends; Close stops every pod in order and then cancels that context.
package pod
