// Package localvm boots the Debian 12 guest image hack/build-vm.sh
// builds (_output/bin/vm: rootfs.img, vmlinuz, initrd.img) under
// qemu-system-x86_64 and runs one shell script in it as root, for the
// tests that need a host this machine is not: one whose systemd (PID 1)
// runs the unified cgroup v2 hierarchy with every controller (cpu,
// memory, pids, io, cpuset, hugetlb), where this machine binds its
// controllers to v1 hierarchies; and one with SELinux, which this
// machine has not.
//
// Run boots a qcow2 overlay of the image made for the run (qemu-img
// create -b), so runs never change the image; shares host directories
// with the guest over virtio-9p (Config.Shares, each at a guest path of
// its choosing, typically the same path as on the host); writes the
// serial console to a log file; and gives the machine no network device,
// so nothing the guest does leaves it (systemd brings up its loopback).
// In the image, nodekit-guest.service mounts the run's own share (tag
// "nodekit") at /nodekit once the system is up and runs the guest.sh
// Run put there: it mounts the other shares, runs Config.Script with
// its output in the share, records the exit status and uptime there,
// and the unit powers the machine off. Run returns the script's exit
// code and output (Result); it kills qemu when ctx ends or
// Config.Timeout passes.
//
// The guest kernel's command line asks for the unified hierarchy
// (systemd.unified_cgroup_hierarchy=1, Debian 12's default anyway) and
// PSI (psi=1); Config.KernelArgs adds to it. SELinuxPermissive's
// arguments boot the same image with SELinux as its LSM (permissive, the
// image's Debian reference policy loaded by systemd), for the tests of
// the SELinux volume paths; without them SELinux is off.
//
// KVM is used when /dev/kvm can run the image's kernel: it opens, answers
// KVM_GET_API_VERSION, and is backed by hardware virtualization
// (kvm_intel or kvm_amd). A /dev/kvm of PVM (kvm_pvm, the software
// hypervisor some nested-VM hosts offer) runs only kernels built as PVM
// guests; Debian's kernel hangs there before its first console line.
// Without a usable KVM, Run logs why and emulates the machine with TCG
// (multi-threaded), which is slower by an order of magnitude or more
// but runs the same kernel, systemd and cgroups: a TCG run is a real
// run, not a skip. Config.Accel forces either.
//
// qemu 7.2 under TCG has been seen to abort a few seconds into a boot.
// A qemu that dies by a signal before the guest starts the script is
// booted once more on a fresh overlay; a second crash, or a failure once
// the script started, is Run's error, with qemu's own output in it.
//
// It does not build the image (hack/build-vm.sh does, from `make
// tools`), does not decide what the script runs (the caller writes it
// and shares the binaries it needs), and keeps no state between runs.
package localvm
