#!/usr/bin/env bash
# Installs the commands that knbox's build and tests need, on Debian 12, as
# root. Idempotent: a command already on PATH is left as it is, so a second
# run installs nothing and needs no root.
#
# Add a dependency by adding "command:debian-package" to DEPS. A command that
# needs more than apt gets a function install_<command> (see kubectl).
set -euo pipefail

DEPS=(
	runc:runc
	# gVisor, the sandboxed runtime of the runsc RuntimeClass.
	runsc:runsc
	# crun: the runtime tests check that knbox names crun when it refuses this
	# host's hybrid cgroups (pkg/runtime TestAvailable/crun).
	crun:crun
	# Tests build container root filesystems from a static busybox; Debian's
	# plain busybox package is dynamically linked, so have_busybox checks.
	busybox:busybox-static
	# Debian's kubernetes-client is kubectl v1.20, far outside kubectl's
	# supported skew (one minor version) from the v1.29 API that knbox
	# serves, so install_kubectl builds a v1.29 kubectl first and falls back
	# to the package only if that fails.
	kubectl:kubernetes-client
	# Egress mode (egress.enabled): the CNI plugins bridge and host-local,
	# and iptables for knbox's NAT and filter chains. Tests check the mode,
	# so both are installed for them.
	cni-plugins:containernetworking-plugins
	iptables:iptables
	# The README's first request (test/e2e TestReadmeCommands runs it).
	curl:curl
	# The console's end-to-end test drives Debian's headless chromium
	# (test/e2e TestConsoleInBrowser).
	chromium:chromium
	# Names on the host: the URL `kubectl get ksvc` prints
	# (http://NAME.NS.localhost:8080) resolves to loopback for every program,
	# the glibc resolver included (getent, Python, Node, wget), through the
	# resolver module that answers RFC 6761's localhost names.
	myhostname:libnss-myhostname
)

# `make bench` (BENCH=1): the data plane benchmark's load generator and its
# nginx anchor. The tests do not need them.
if [[ ${BENCH:-} == 1 ]]; then
	DEPS+=(wrk:wrk nginx:nginx)
fi

# kubectl of the Kubernetes line knbox speaks (k8s.io/api v0.29 in go.mod).
KUBECTL_VERSION="${KUBECTL_VERSION:-v1.29.2}"
INSTALL_DIR="${INSTALL_DIR:-/usr/local/bin}"

export PATH="$PATH:/usr/local/go/bin"
export DEBIAN_FRONTEND=noninteractive

log() { printf 'install-deps: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

need_root() {
	[[ $(id -u) -eq 0 ]] || die "$1 is missing; run $0 as root to install it"
}

apt_updated=false
apt_install() {
	local pkg=$1
	if [[ $apt_updated == false ]]; then
		log "apt-get update"
		apt-get update -qq >&2 || die "apt-get update failed"
		apt_updated=true
	fi
	log "apt-get install $pkg"
	apt-get install -y -qq --no-install-recommends "$pkg" >&2
}

# install_kubectl builds kubectl from the k8s.io/kubectl module through the Go
# module proxy. `go install k8s.io/kubernetes/cmd/kubectl@v1.29.x` does not
# work: k8s.io/kubernetes has replace directives (and its staging modules are
# not in its module zip), and k8s.io/kubectl, which holds kubectl's code, has
# no main package. So a throwaway module supplies a main that calls
# kubectl's own command constructor.
install_kubectl() {
	local pkg=$1
	if ! command -v go >/dev/null 2>&1; then
		log "go not found; falling back to Debian's $pkg (kubectl v1.20)"
		apt_install "$pkg"
	elif ! build_kubectl; then
		log "building kubectl failed; falling back to Debian's $pkg (kubectl v1.20)"
		apt_install "$pkg"
	fi
}

# build_kubectl runs in a subshell, so its EXIT trap removes its work dir.
build_kubectl() (
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	minor=${KUBECTL_VERSION#v1.}
	minor=${minor%%.*}
	cat >"$tmp/go.mod" <<-EOF
		module knbox.local/kubectl

		go 1.22

		require (
			k8s.io/component-base v0.${KUBECTL_VERSION#v1.}
			k8s.io/kubectl v0.${KUBECTL_VERSION#v1.}
		)
	EOF
	cat >"$tmp/main.go" <<-'EOF'
		// Command kubectl, built from the k8s.io/kubectl module.
		package main

		import (
			"k8s.io/component-base/cli"
			"k8s.io/kubectl/pkg/cmd"
			"k8s.io/kubectl/pkg/cmd/util"
		)

		func main() {
			if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
				util.CheckErr(err)
			}
		}
	EOF
	v=k8s.io/client-go/pkg/version
	cv=k8s.io/component-base/version
	ldflags="-s -w -X $v.gitVersion=$KUBECTL_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor"
	ldflags+=" -X $cv.gitVersion=$KUBECTL_VERSION -X $cv.gitMajor=1 -X $cv.gitMinor=$minor"
	log "building kubectl $KUBECTL_VERSION from k8s.io/kubectl (a few minutes on 2 cores)"
	# Chained with &&: errexit does not apply inside `if ! build_kubectl`.
	cd "$tmp" &&
		go mod tidy >&2 &&
		CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o kubectl . >&2 &&
		install -m 0755 kubectl "$INSTALL_DIR/kubectl" &&
		log "installed $INSTALL_DIR/kubectl $KUBECTL_VERSION"
)

# have_<command> overrides "on PATH" as the test that a command is usable.
have_busybox() {
	local b
	b=$(command -v busybox 2>/dev/null) || return 1
	# ldd (libc-bin, always on Debian) fails on a static binary.
	! ldd "$b" >/dev/null 2>&1
}

# Debian installs the CNI plugins in /usr/lib/cni, not on PATH.
have_cni-plugins() {
	[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]]
}

# myhostname is usable when the glibc resolver answers a name under
# localhost (the module is installed and named in /etc/nsswitch.conf).
have_myhostname() {
	getent hosts knbox-install-check.localhost >/dev/null 2>&1
}

# Debian's package adds "myhostname" to the hosts line of /etc/nsswitch.conf
# when it is installed; a file that an administrator edited may lack it, so
# this adds it after "files" if it is still missing.
# nginx's package starts a system nginx on port 80 where systemd runs; the
# benchmark starts its own in a private network namespace, so the system
# one is stopped and disabled again.
install_nginx() {
	apt_install "$1"
	if [[ -d /run/systemd/system ]]; then
		systemctl disable --now nginx >&2 || true
	fi
}

install_myhostname() {
	apt_install "$1" || return 1
	if ! grep -Eq '^hosts:.*[[:space:]]myhostname([[:space:]]|$)' /etc/nsswitch.conf; then
		log "adding myhostname to the hosts line of /etc/nsswitch.conf"
		sed -i -E 's/^(hosts:[[:space:]]*files)/\1 myhostname/' /etc/nsswitch.conf
	fi
}

have() {
	if declare -F "have_$1" >/dev/null; then
		"have_$1"
	else
		command -v "$1" >/dev/null 2>&1
	fi
}

installed=()
for dep in "${DEPS[@]}"; do
	cmd=${dep%%:*}
	pkg=${dep#*:}
	if have "$cmd"; then
		continue
	fi
	need_root "$cmd"
	if declare -F "install_$cmd" >/dev/null; then
		"install_$cmd" "$pkg" || die "could not install $cmd"
	else
		apt_install "$pkg" || die "could not install $cmd (Debian package $pkg)"
	fi
	hash -r
	have "$cmd" || die "$cmd is still not usable after installing it"
	installed+=("$cmd")
done

if ((${#installed[@]})); then
	log "installed: ${installed[*]}"
fi
for dep in "${DEPS[@]}"; do
	cmd=${dep%%:*}
	if [[ $cmd == cni-plugins ]]; then
		log "$cmd: /usr/lib/cni"
	elif [[ $cmd == myhostname ]]; then
		log "$cmd: $(grep -E '^hosts:' /etc/nsswitch.conf)"
	else
		log "$cmd: $(command -v "$cmd")"
	fi
done
