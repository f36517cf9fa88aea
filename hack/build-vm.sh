#!/usr/bin/env bash
# Builds the Debian 12 guest image internal/localvm boots for the tests
# that need a host this machine is not: a unified cgroup v2 host (this
# machine's own controllers are bound to v1 hierarchies) and an SELinux
# host (this one has none): _output/bin/vm/{rootfs.img,vmlinuz,initrd.img}.
#
# debootstrap (bookworm, minbase) from the machine's own Debian mirror
# (the first .../debian URI in /etc/apt/sources.list*, or
# $NODEKIT_DEBIAN_MIRROR) into a directory, with Debian's kernel,
# systemd as PID 1 (its default on Debian 12 is the unified cgroup v2
# hierarchy), D-Bus, udev, containerd 1.6, runc, the CNI plugins,
# iptables, iproute2 and etcd, and what nodekit's tests run in the guest
# (busybox-static, umoci, python3, curl, netcat, nsenter); and Debian's
# SELinux reference policy (selinux-policy-default, built into
# /etc/selinux/default by its postinst, with policycoreutils and
# selinux-utils, and a module declaring the container types its
# lxc_contexts names), configured permissive. The kernel's default LSM is not
# SELinux, so the policy is loaded only when a run asks for SELinux on
# the kernel command line (localvm.SELinuxPermissive); other runs boot
# as before. The files are not labeled (a permissive guest needs no
# labels; context= mounts and seclabel do not either). The guest is
# configured for one job: nodekit-guest.service mounts the host's
# virtio-9p share tagged "nodekit" at /nodekit, runs /nodekit/guest.sh
# (written by internal/localvm) and powers the machine off. No network
# is configured beyond loopback (systemd brings lo up itself) and
# localvm gives the machine no network device; Debian's containerd and
# etcd services are masked (tests start their own), as are the gettys.
#
# The directory becomes an ext4 image with `mkfs.ext4 -d` (no loop
# device, no mount); the kernel and initrd are kept beside it. The result
# lives in $NODEKIT_CACHE (default /var/cache/nodekit)/vm-HASH, HASH the
# sha256 of this script, so a change here builds a new image, and
# _output/bin/vm holds symlinks to it. localvm never writes to it: each
# run boots a qcow2 overlay of its own. Needs root, debootstrap and
# e2fsprogs (hack/install-deps.sh); called by hack/build-tools.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
hash=$(sha256sum "$root/hack/build-vm.sh" | cut -c1-12)
out=$root/_output/bin/vm
cache=${NODEKIT_CACHE:-/var/cache/nodekit}/vm-$hash
files=(rootfs.img vmlinuz initrd.img)

complete() { # dir: holds every file of the image
  local f
  for f in "${files[@]}"; do
    [ -s "$1/$f" ] || return 1
  done
}
link() {
  mkdir -p "$out"
  local f
  for f in "${files[@]}"; do
    ln -sfn "$cache/$f" "$out/$f"
  done
  echo "$hash" >"$out/version"
}

if complete "$out" && [ "$(cat "$out/version" 2>/dev/null)" = "$hash" ]; then
  exit 0
fi
if complete "$cache"; then
  link
  echo "build-vm: guest image $hash from $cache"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "build-vm: building the guest image needs root (debootstrap)" >&2
  exit 1
fi

mirror=${NODEKIT_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # The first URI ending in /debian (not debian-security) that apt uses.
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
    grep -E '^[[:space:]]*(deb|URIs:)[[:space:]]' |
    tr ' \t' '\n\n' | grep -E '^https?://[^[:space:]]+/debian/?$' | head -1 || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

packages=(
  # boot and init
  linux-image-amd64 systemd systemd-sysv dbus udev kmod util-linux
  # the node's runtime and network tools
  containerd runc containernetworking-plugins iptables iproute2
  # the control plane's store
  etcd-server
  # what the tests run in the guest (see hack/install-deps.sh)
  busybox-static umoci python3-minimal curl netcat-openbsd ca-certificates procps
  # SELinux, for the runs that boot with it (localvm.SELinuxPermissive)
  selinux-policy-default policycoreutils selinux-utils
)

echo "build-vm: building guest image $hash (debootstrap bookworm from $mirror); takes minutes"
start=$SECONDS
mkdir -p "$(dirname "$cache")"
work=$(mktemp -d "$(dirname "$cache")/.vm-build.XXXXXX")
cleanup() {
  # debootstrap unmounts what it mounted; a failure halfway may not.
  for m in proc sys dev/pts dev; do
    mountpoint -q "$work/root/$m" 2>/dev/null && umount -l "$work/root/$m"
  done
  rm -rf "$work"
}
trap cleanup EXIT
if ! debootstrap --variant=minbase --components=main \
  --include="$(
    IFS=,
    echo "${packages[*]}"
  )" bookworm "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1; then
  tail -30 "$work/debootstrap.log" >&2
  echo "build-vm: debootstrap failed (log above)" >&2
  exit 1
fi
echo "build-vm: debootstrap done in $((SECONDS - start))s"

r=$work/root
echo nodekit-vm >"$r/etc/hostname"
cat >"$r/etc/hosts" <<'EOF'
127.0.0.1	localhost
127.0.1.1	nodekit-vm
::1	localhost ip6-localhost ip6-loopback
EOF
echo '/dev/vda / ext4 rw,errors=remount-ro 0 1' >"$r/etc/fstab"
# Generated at boot on each run's overlay.
: >"$r/etc/machine-id"
rm -f "$r/var/lib/dbus/machine-id"
mkdir -p "$r/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' >"$r/etc/systemd/journald.conf.d/nodekit.conf"
# SELinux, when the kernel runs it (security=selinux on its command
# line), is permissive with Debian's reference policy: systemd loads the
# policy at boot; nothing is denied, the files need no labels.
if ! ls "$r"/etc/selinux/default/policy/policy.* >/dev/null 2>&1; then
  echo "build-vm: the SELinux policy was not built in the guest: $(ls "$r/etc/selinux/default" 2>&1)" >&2
  exit 1
fi
printf 'SELINUX=permissive\nSELINUXTYPE=default\nSETLOCALDEFS=0\n' >"$r/etc/selinux/config"
# The policy's lxc_contexts names container_t, container_file_t and
# container_ro_file_t (the labels go-selinux, and so kubelet and
# containerd, give containers and their files), but Debian 12 builds the
# reference policy without its container module: the kernel refuses those
# labels (a context= mount fails with EINVAL). This module declares them,
# as Fedora's container-selinux does; permissive needs no rules for them.
cat >"$r/tmp/container.cil" <<'CIL'
(type container_t)
(roletype system_r container_t)
(type container_file_t)
(roletype object_r container_file_t)
(type container_ro_file_t)
(roletype object_r container_ro_file_t)
CIL
mount -t proc proc "$r/proc"
if ! chroot "$r" semodule -n -s default -i /tmp/container.cil >"$work/semodule.log" 2>&1; then
  umount "$r/proc"
  cat "$work/semodule.log" >&2
  echo "build-vm: semodule -i container.cil failed (log above)" >&2
  exit 1
fi
umount "$r/proc"
rm -f "$r/tmp/container.cil"

cat >"$r/usr/local/sbin/nodekit-guest" <<'EOF'
#!/bin/sh
# Mounts the host's share (virtio-9p, tag nodekit) at /nodekit and runs
# the script internal/localvm put there. nodekit-guest.service powers the
# machine off when it returns.
set -u
mkdir -p /nodekit
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none nodekit /nodekit; then
  echo "nodekit-guest: cannot mount the share tagged nodekit" >&2
  exit 1
fi
exec /bin/sh /nodekit/guest.sh
EOF
chmod 0755 "$r/usr/local/sbin/nodekit-guest"
cat >"$r/etc/systemd/system/nodekit-guest.service" <<'EOF'
[Unit]
Description=nodekit: run the host's job from the share, then power off
After=multi-user.target
SuccessAction=poweroff-force
FailureAction=poweroff-force

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/nodekit-guest
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
systemctl --root="$r" set-default multi-user.target >/dev/null 2>&1
systemctl --root="$r" enable nodekit-guest.service >/dev/null 2>&1
# Tests start their own containerd and etcd; nobody logs in; the
# periodic maintenance only slows the boot.
systemctl --root="$r" mask containerd.service etcd.service getty@.service \
  serial-getty@.service apt-daily.timer apt-daily-upgrade.timer \
  e2scrub_reap.service e2scrub_all.timer fstrim.timer >/dev/null 2>&1
rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/*

# The kernel's version names its initrd (update-initramfs leaves .dpkg-bak
# copies beside it).
kver=$(find "$r/boot" -name 'vmlinuz-*' -printf '%f\n' | sed 's/^vmlinuz-//' | sort -V | tail -1)
if [ -z "$kver" ] || [ ! -s "$r/boot/initrd.img-$kver" ]; then
  echo "build-vm: no kernel or initrd in the guest's /boot: $(ls "$r/boot")" >&2
  exit 1
fi
cp "$r/boot/vmlinuz-$kver" "$work/vmlinuz"
cp "$r/boot/initrd.img-$kver" "$work/initrd.img"
# 10 GiB of file system (sparse: the file holds only what is written);
# tests write container images and state on the overlay.
truncate -s 10G "$work/rootfs.img"
mkfs.ext4 -q -F -L nodekit-root -d "$r" "$work/rootfs.img"
rm -rf "$r"
chmod 0444 "$work/rootfs.img" "$work/vmlinuz" "$work/initrd.img"
echo "$mirror" >"$work/mirror"
rm -rf "$cache"
mv "$work" "$cache"
trap - EXIT
link
echo "build-vm: built guest image $hash in $((SECONDS - start))s ($(du -sh "$cache/rootfs.img" | cut -f1) used of the image)"
