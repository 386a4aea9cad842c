// Package runtime runs containers from OCI bundles through handlers chosen by
// name, as containerd's runtime table does: runc, runsc (gVisor), crun where
// the host allows it, and process (a plain child process, for machines without
// an OCI runtime).
//
// It knows nothing of Knative, images or networking: callers hand it a bundle
// (a directory with config.json and a rootfs) and get back a Container to
// signal, wait for and delete. It must not import other knbox packages.
//
// # How an OCI runtime is driven
//
// Create runs "<runtime> run" without --detach, as a child of this process in
// its own process group. That runtime process is the container's monitor: it
// is the parent (runc, crun) or grandparent (runsc, through its sandbox) of the
// container's init, it reaps whatever the container leaves behind, and its own
// exit status is the container's. Create returns once the runtime has written
// the pid file (for runc after the process was started; for runsc once its
// sandbox runs). The monitor is not tied to this process's lifetime: if the
// daemon dies, containers keep running and Recover finds them again.
//
// Why not "run --detach" and PR_SET_CHILD_SUBREAPER: a detached runtime leaves
// the container's init to the nearest subreaper, so the daemon would have to be
// one. A subreaper inherits every orphan below it, not only container inits:
// runsc's gofer, its sandbox's ptrace stubs (each in a session of its own) and
// any daemon that a "process" container forks. Reaping those safely needs a
// wait4(-1) reaper, and that races with os/exec (and with every other package
// of the daemon that starts a child) for exit statuses. The other option the
// OCI CLI offers, polling "runc state", cannot give an exit code at all, and
// "runsc wait" from a non-parent reports "exit status unavailable" once the
// sandbox is gone. A resident monitor costs about 2 MB of private memory per
// runc container and gives exact exit codes without any process-wide setting.
//
// Exit status: the runtime CLIs report a death by signal n as exit code 128+n.
// ExitStatus.Code keeps that number and Signal is read back from it (codes 129
// to 192), which is also what Kubernetes shows; a program that calls exit(137)
// itself is therefore reported as killed by SIGKILL. The process handler sees
// the real wait status and reports it the same way. For a container that
// Recover adopted, this process is no longer an ancestor of it: its exit is
// observed through a pidfd and the code is unknown (Code -1).
//
// OOM: when the container's init was killed by SIGKILL and the memory cgroup it
// ran in counts an OOM kill (cgroup v1 memory.oom_control "oom_kill", cgroup v2
// memory.events "oom_kill"), ExitStatus.OOMKilled is set. The cgroup is read
// when the monitor exits; runc keeps it until Delete because Create passes
// --keep. runsc and crun have no --keep and remove the cgroups they created
// before they exit, so for them OOMKilled stays false unless the handler
// manages the cgroups (OCIConfig.ManageCgroups, below): runsc joins a cgroup
// that exists, writes no limits into it and leaves it in place. Under runsc
// the whole sandbox is in the cgroup, so an OOM kill there is the sandbox's
// (its sentry holds the application's memory) and the container dies with it.
//
// Output: stdout and stderr are pipes whose read ends this process copies into
// IO; stdin is /dev/null. There is no terminal (process.terminal must be
// false). If the daemon dies, the read ends die with it and a container that
// writes afterwards gets EPIPE (SIGPIPE by default); an adopted container's
// output is not captured.
//
// Files: Create writes the runtime's pid file as "<id>.pid" into the bundle
// directory and removes it once read; the runtime keeps its state under the
// handler's Root (--root), which must belong to one handler alone. A Create
// that fails leaves nothing there: it runs "delete --force" for the id
// whether or not "list" shows it (runc run --keep whose container fails to
// start leaves a state directory without state.json, which list skips and
// which made every later run of the id fail with "container with given ID
// already exists"), and its error carries what the runtime wrote on stderr.
//
// # cgroups
//
// The caller writes linux.resources and linux.cgroupsPath into config.json;
// this package passes them through. With the cgroupfs driver (knbox does not
// pass --systemd-cgroup) on a cgroup v1 host such as knbox's reference host
// (hybrid layout: every controller on its own v1 hierarchy under
// /sys/fs/cgroup/<controller>, an empty cgroup2 at /sys/fs/cgroup/unified),
// runc and runsc read an absolute cgroupsPath "/knbox/x" as
// /sys/fs/cgroup/<controller>/knbox/x in each v1 hierarchy, create what is
// missing and write the limits. runc takes a relative path (and an empty one,
// as the container's id) below the cgroup it runs in, which is the daemon's;
// give absolute paths. runc removes the leaf at Delete (parents stay); runsc
// decides per controller: it creates the cgroups that are missing, writes the
// limits into those and removes them when the sandbox exits, and joins
// cgroups that existed beforehand without writing into them or removing
// them. crun 1.8 refuses the hybrid layout ("cgroups in hybrid mode not
// supported"); Available reports that.
//
// With OCIConfig.ManageCgroups the handler makes the memory and cpu cgroups
// of an absolute cgroupsPath itself before the runtime starts, in each
// controller's v1 hierarchy, and writes the spec's memory (limit, swap,
// reservation, swappiness, disableOOMKiller) and cpu (shares, period, quota,
// burst, idle) resources into them. Fields of these two controllers that it
// cannot write (kernelTCP, useHierarchy, realtime) fail Create rather than
// being dropped; the deprecated kernel memory limit is ignored, as the
// runtime-spec allows. Every other controller (pids, cpuset, devices, ...)
// stays the runtime's. A spec mount of type cgroup at /sys/fs/cgroup becomes
// read-only bind mounts of the two cgroups at /sys/fs/cgroup/memory and
// /sys/fs/cgroup/cpu: Create rewrites config.json in the bundle for that,
// and changes nothing else in it. Delete removes the two cgroups after the
// exit status (and the OOM counter) was read; while they still have
// processes (for an adopted container Delete waits for the sandbox process
// only, and its gofer and ptrace stubs may take a moment longer) it retries,
// for at most 10s. A record of each container's cgroups, kept in
// Root+".cgroups" until they are gone, lets Recover return them after a
// crash: with the live container they belong to or, when the runtime no
// longer knows that container (runsc forgets one once it has exited), as an
// exited container whose Delete removes them. Only controllers with a v1
// hierarchy are managed: on a cgroup v2 host ManageCgroups does nothing, and
// the runtime handles the cgroups as without it.
//
// # runsc (gVisor)
//
// On knbox's reference host (Debian 12 runsc 20221219, Linux 6.18, nested in
// a VM) runsc needs the global argument --network=host, for two reasons. With
// its default --network=sandbox it refuses to start: it decides that it runs
// in the root network namespace by probing /proc/sys/net/core/rmem_default,
// which Linux 6.x provides in every network namespace. And with host network
// the sandbox joins the network namespace named in the spec (or makes a new
// one when the spec lists one without a path) and its sockets are real sockets
// in that namespace, so a caller can dial the container on that namespace's
// loopback; with the sandbox's own netstack they would not be (newer runsc
// releases probe /proc/sys/net/core/dev_weight instead and start with
// --network=sandbox, but its loopback is still gVisor's own). --network=none
// runs with a loopback that only the sandbox sees. The default platform,
// ptrace, works; --platform=kvm hangs at boot on this host, and systrap does
// not exist in this runsc version. --ignore-cgroups is not needed on cgroup
// v1. Every invocation (run, kill, delete, list) must carry the same global
// arguments: runsc reads its network mode from the flags of each command.
//
// runsc applies the spec's limits to the host cgroups of the whole sandbox
// (sentry and gofer), and shows the container no cgroup files of its own: it
// drops a spec mount of type cgroup, and its --cgroupfs flag mounts the
// sentry's own emulated cgroupfs instead, which shows default values (no
// memory limit, quota -1, 1024 shares) rather than the spec's and is writable
// by root in the container (checked with runsc 20221219). Hence
// ManageCgroups: with it the container reads the sandbox's real host cgroups
// at /sys/fs/cgroup/memory and /sys/fs/cgroup/cpu (limits, usage, the OOM
// counter, and the host pids of the sandbox's processes in cgroup.procs),
// through gofer bind mounts that refuse writes (EROFS) from any uid. What it
// does not get is a cgroup view of its own: /proc/self/cgroup is empty and
// /proc/self/mountinfo lists those mounts as 9p, so programs that find their
// cgroup through those files (the JVM's container support, Go's automaxprocs)
// find none; programs that read the fixed paths see the limits.
//
// runsc 20221219 applies the spec's seccomp profile (--oci-seccomp) but
// answers EPERM to every SCMP_ACT_ERRNO rule whatever its errnoRet, where
// glibc needs ENOSYS from clone3 to fall back to clone (pthread_create
// fails otherwise). With OCIConfig.SandboxENOSYS, Create turns the profile's
// ENOSYS rules into allow rules: gVisor, which has no clone3, answers
// ENOSYS itself, and its io_uring stays inside the sandbox. It also keeps
// the reason a container failed to start (a bind source its gofer cannot
// mount) in its debug log only, which knbox does not enable: such a failure
// reads "cannot create sandbox".
//
// # The process handler
//
// process does not isolate. It is for trusted code on machines without an
// OCI runtime, and the daemon registers it only when the operator turns it
// on; its RuntimeClass says that it does not isolate (Unisolated).
//
// It runs process.args with process.env (exactly, nothing inherited),
// process.cwd, process.user.uid, gid and additionalGids, chrooted into the
// bundle's root, in its own process group, with stdin, stdout and stderr as
// above. It refuses uid 0 (RootRefuser): root in a chroot is root on the
// host. The child starts with no capabilities it could use (empty bounding,
// inheritable and ambient sets; its non-zero uid clears the effective and
// permitted sets) and with no_new_privs, so neither a setuid-root file nor
// file capabilities in the image give it any. It joins the network
// namespace named by path in the spec (setns on a locked OS thread that then
// forks the child), makes a new one when the spec lists a network namespace
// without a path (CLONE_NEWNET, whose loopback stays down), and stays in the
// daemon's when the spec lists none. root.readonly is honoured with a
// read-only bind mount of the root under the handler's state directory
// (submounts of the root stay writable). When the main process exits, the
// rest of its process group is killed, much as the end of a PID namespace's
// init ends the namespace.
//
// It does NOT apply: the other namespaces (PID, mount, IPC, UTS, user,
// cgroup: the child sees and can signal every host process of its uid, and
// shares the host's hostname and mounts); the spec's mounts (no /proc, /dev,
// /sys or /tmp unless the root has them); linux.resources and cgroupsPath
// (no memory or CPU limits, so OOMKilled is never set); the spec's
// capabilities (none, whatever it says), seccomp, AppArmor and SELinux
// labels, rlimits, umask, masked and read-only paths, sysctls, devices,
// hooks and hostname. Without the spec's mounts, containers could not share
// volumes, so it does not implement MultiContainer: it runs one container
// per instance.
package runtime
