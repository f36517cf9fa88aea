package localvm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// sysRoot is the root KVMUsable looks below (/dev/kvm, /sys/module).
const sysRoot = "/"

// kvmGetAPIVersion is KVM_GET_API_VERSION, _IO(0xAE, 0x00); KVM's API
// version has been 12 since Linux 2.6.22.
const (
	kvmGetAPIVersion = 0xAE00
	kvmAPIVersion    = 12
)

// KVMUsable reports why KVM under root (normally "/") cannot run the
// image's kernel, or nil when it can: /dev/kvm must open and answer API
// version 12, and be hardware virtualization (the kvm_intel or kvm_amd
// module). A /dev/kvm backed only by kvm_pvm runs nothing but kernels
// built as PVM guests, which Debian's is not.
func KVMUsable(root string) error {
	dev := filepath.Join(root, "dev", "kvm")
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dev, err)
	}
	defer f.Close()
	if root == sysRoot {
		v, err := unix.IoctlRetInt(int(f.Fd()), kvmGetAPIVersion)
		if err != nil {
			return fmt.Errorf("KVM_GET_API_VERSION on %s: %w", dev, err)
		}
		if v != kvmAPIVersion {
			return fmt.Errorf("%s has KVM API version %d, want %d", dev, v, kvmAPIVersion)
		}
	}
	module := func(name string) bool {
		_, err := os.Stat(filepath.Join(root, "sys", "module", name))
		return err == nil
	}
	switch {
	case module("kvm_intel") || module("kvm_amd"):
		return nil
	case module("kvm_pvm"):
		return errors.New("/dev/kvm is PVM (kvm_pvm, a software hypervisor for nested guests, with neither kvm_intel nor kvm_amd loaded): it runs only kernels built as PVM guests, and Debian's kernel in the image hangs there before its first console line")
	}
	return errors.New("/dev/kvm is backed by neither kvm_intel nor kvm_amd (no hardware virtualization)")
}

// qemuArgs is qemu-system-x86_64's command line for a run: no network
// device, no display, the serial console to console, the overlay as a
// virtio disk and the shares over virtio-9p (fsdev0 the job share).
func qemuArgs(cfg Config, accel Accel, overlay, console, job string) []string {
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none",
		"-no-reboot", "-nic", "none",
		"-machine", "q35",
		"-m", strconv.Itoa(cfg.MemoryMiB), "-smp", strconv.Itoa(cfg.CPUs),
		"-serial", "file:" + console,
		"-kernel", filepath.Join(cfg.ImageDir, KernelFile),
		"-initrd", filepath.Join(cfg.ImageDir, InitrdFile),
		"-append", kernelCmdline(cfg.KernelArgs),
		"-drive", "file=" + overlay + ",if=virtio,format=qcow2,cache=unsafe,discard=unmap",
		"-device", "virtio-rng-pci",
	}
	if accel == AccelKVM {
		args = append(args, "-accel", "kvm", "-cpu", "host")
	} else {
		args = append(args, "-accel", "tcg,thread=multi,tb-size=512", "-cpu", "max")
	}
	args = append(args, share(0, JobTag, job, false)...)
	for i, s := range cfg.Shares {
		args = append(args, share(i+1, shareTag(i), s.HostPath, s.ReadOnly)...)
	}
	return args
}

// kernelCmdline is the guest kernel's command line: the root disk, the
// serial console, no reboot loop after a panic (qemu exits instead),
// cgroup v2 and PSI.
func kernelCmdline(extra []string) string {
	return strings.Join(append([]string{
		"root=/dev/vda", "rw", "console=ttyS0", "panic=-1",
		"systemd.unified_cgroup_hierarchy=1", "psi=1",
		"systemd.show_status=1", "systemd.log_target=console",
	}, extra...), " ")
}

// share is a virtio-9p device exporting dir under tag.
func share(i int, tag, dir string, readOnly bool) []string {
	fsdev := fmt.Sprintf("local,id=fsdev%d,path=%s,security_model=none", i, dir)
	if readOnly {
		fsdev += ",readonly=on"
	}
	return []string{
		"-fsdev", fsdev,
		"-device", fmt.Sprintf("virtio-9p-pci,fsdev=fsdev%d,mount_tag=%s", i, tag),
	}
}

// shareTag is the 9p tag of Config.Shares[i].
func shareTag(i int) string { return "share" + strconv.Itoa(i) }

// prepareJob writes the job share: guest.sh, which nodekit-guest.service
// runs from JobDir, and the caller's script as job.sh.
func prepareJob(job string, cfg Config) error {
	if err := os.RemoveAll(job); err != nil {
		return fmt.Errorf("localvm: %w", err)
	}
	if err := os.MkdirAll(job, 0o755); err != nil {
		return fmt.Errorf("localvm: %w", err)
	}
	if err := os.WriteFile(filepath.Join(job, "job.sh"), []byte(cfg.Script), 0o755); err != nil {
		return fmt.Errorf("localvm: %w", err)
	}
	if err := os.WriteFile(filepath.Join(job, "guest.sh"), []byte(guestScript(cfg.Shares)), 0o755); err != nil {
		return fmt.Errorf("localvm: %w", err)
	}
	return nil
}

// guestScript mounts the shares, runs job.sh with its output in
// output.log, and records the exit status last (exit-code appears only
// once the script is done).
func guestScript(shares []Share) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# Written by internal/localvm; run by nodekit-guest.service in the guest.\n")
	fmt.Fprintf(&b, "cut -d' ' -f1 /proc/uptime >%s/started\n", JobDir)
	fmt.Fprintf(&b, "exec >%s/output.log 2>&1\n", JobDir)
	for i, s := range shares {
		// Read-only shares may be cached in the guest; writes to the
		// others go straight to the host.
		opts := "trans=virtio,version=9p2000.L,msize=512000,cache=none"
		if s.ReadOnly {
			opts = "trans=virtio,version=9p2000.L,msize=512000,cache=loose,ro"
		}
		fmt.Fprintf(&b, "mkdir -p %s && mount -t 9p -o %s %s %s || { echo 'localvm: cannot mount share %s at %s'; echo 125 >%s/exit-code; exit 0; }\n",
			shq(s.GuestPath), opts, shareTag(i), shq(s.GuestPath), shareTag(i), s.GuestPath, JobDir)
	}
	fmt.Fprintf(&b, "cd %s && /bin/sh %s/job.sh\n", JobDir, JobDir)
	fmt.Fprintf(&b, "echo $? >%s/exit-code.tmp && mv %s/exit-code.tmp %s/exit-code\nsync\n", JobDir, JobDir, JobDir)
	return b.String()
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
