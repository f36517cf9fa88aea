#!/usr/bin/env bash
# Installs the Debian packages nodekit's local node environment needs:
# containerd, runc, the CNI plugins, busybox-static (cgroupmgr's runc test
# and the image builder's unit tests; the test images use the upstream
# busybox hack/build-busybox.sh builds),
# umoci, iptables and etcd, the tools the local agnhost image copies
# from the machine (curl, netcat-openbsd), systemd and dbus-daemon for
# the tests' private systemd, and libseccomp-dev and
# pkg-config for the runc that hack/build-containerd2.sh builds, gcc,
# make, bzip2 and libc6-dev for the busybox hack/build-busybox.sh builds,
# debootstrap, e2fsprogs, qemu-system-x86 and qemu-utils for the cgroup v2
# guest (hack/build-vm.sh, internal/localvm).
# Idempotent: does nothing when all are present.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have containerd || need+=(containerd)
have ctr || need+=(containerd)
have runc || need+=(runc)
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/portmap ] || need+=(containernetworking-plugins)
[ -x /usr/bin/busybox ] && /usr/bin/busybox --list >/dev/null 2>&1 || need+=(busybox-static)
have umoci || need+=(umoci)
have iptables || need+=(iptables)
have etcd || need+=(etcd-server)
have ip || need+=(iproute2)
# Copied into the local agnhost image, as upstream's carries them.
have curl || need+=(curl)
[ -x /bin/nc.openbsd ] || need+=(netcat-openbsd)
# The private systemd the systemd cgroup driver's and logind's tests run
# (internal/localsystemd): systemd (with logind and busctl), its system
# bus, and nsenter (util-linux) to enter its namespaces.
[ -x /lib/systemd/systemd ] && [ -x /lib/systemd/systemd-logind ] || need+=(systemd)
have dbus-daemon || need+=(dbus-daemon)
have nsenter || need+=(util-linux)
# runc for containerd 2 (hack/build-containerd2.sh) builds with seccomp.
have pkg-config || need+=(pkg-config)
[ -f /usr/include/seccomp.h ] || need+=(libseccomp-dev)
# hack/build-busybox.sh compiles upstream busybox static: a C toolchain,
# the static C library and bzip2 for the tarball.
have gcc || need+=(gcc)
have make || need+=(make)
have bzip2 || need+=(bzip2)
[ -f /usr/include/stdio.h ] && [ -f "$(gcc -print-file-name=libc.a 2>/dev/null)" ] || need+=(libc6-dev)
# The cgroup v2 guest (hack/build-vm.sh builds its image with debootstrap
# and mkfs.ext4 -d; internal/localvm boots it with qemu, qcow2 overlays).
have debootstrap || need+=(debootstrap)
have mkfs.ext4 || need+=(e2fsprogs)
have qemu-system-x86_64 || need+=(qemu-system-x86)
have qemu-img || need+=(qemu-utils)

if [ ${#need[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing ${need[*]}; run as root (or: sudo $0)" >&2
  exit 1
fi
echo "install-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
# Debian starts its own containerd and etcd services; nodekit runs private
# instances with their own sockets and ports, so the system ones are not
# needed. Leave them alone if the machine uses them.
