package localvm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/localcp"
)

// The image's files, as hack/build-vm.sh names them.
const (
	ImageFile  = "rootfs.img"
	KernelFile = "vmlinuz"
	InitrdFile = "initrd.img"
	// ImageSubdir is the image's directory below the bin dir.
	ImageSubdir = "vm"
	// JobTag is the 9p tag of the run's own share, mounted at JobDir.
	JobTag = "nodekit"
	// JobDir is where the guest sees the run's own share.
	JobDir = "/nodekit"

	defaultMemoryMiB = 2048
	defaultCPUs      = 2
	defaultTimeout   = 10 * time.Minute
)

// Accel is how qemu runs the guest's CPUs.
type Accel string

// Accelerators. AccelAuto takes KVM when it can run the guest and TCG
// otherwise.
const (
	AccelAuto Accel = ""
	AccelKVM  Accel = "kvm"
	AccelTCG  Accel = "tcg"
)

// Share is a host directory the guest mounts over virtio-9p.
type Share struct {
	// HostPath is the directory on the host.
	HostPath string
	// GuestPath is where the guest mounts it; "" is HostPath.
	GuestPath string
	// ReadOnly shares it read-only.
	ReadOnly bool
}

// Config configures Run.
type Config struct {
	// ImageDir holds ImageFile, KernelFile and InitrdFile
	// (hack/build-vm.sh); "" is vm/ in $NODEKIT_BIN_DIR or the
	// checkout's _output/bin.
	ImageDir string
	// WorkDir is the run's own directory on the host: the overlay, the
	// console log and the job share (WorkDir/job, JobDir in the guest)
	// go there. It must exist.
	WorkDir string
	// Script is the shell script (/bin/sh) the guest runs as root, in
	// JobDir. Its output (stdout and stderr) is Result.Output.
	Script string
	// Shares are more host directories the guest mounts before Script.
	Shares []Share
	// MemoryMiB is the guest's memory; 0 is 2048.
	MemoryMiB int
	// CPUs is the guest's CPU count; 0 is 2.
	CPUs int
	// Accel chooses KVM or TCG; AccelAuto (the default) takes KVM when
	// KVMUsable says it can and TCG otherwise.
	Accel Accel
	// Timeout bounds the run (boot, script, power-off); 0 is 10 minutes.
	Timeout time.Duration
	// KernelArgs are added to the guest kernel's command line.
	KernelArgs []string
	// QEMU and QEMUImg are the binaries; "" looks up
	// qemu-system-x86_64 and qemu-img on $PATH.
	QEMU, QEMUImg string
}

// SELinuxPermissive returns the kernel arguments (Config.KernelArgs)
// that boot the guest with SELinux as its major LSM, permissive, with the
// image's policy (Debian's reference policy, which systemd loads at
// boot). Without them the kernel's default LSMs run and SELinux is off.
func SELinuxPermissive() []string {
	return []string{"security=selinux", "selinux=1", "enforcing=0"}
}

// Result is what a run did.
type Result struct {
	// ExitCode is Script's exit status.
	ExitCode int
	// Output is Script's stdout and stderr.
	Output string
	// ConsoleLog is the file holding the guest's serial console.
	ConsoleLog string
	// Accel is the accelerator the run used.
	Accel Accel
	// BootSeconds is the guest's uptime when Script started.
	BootSeconds float64
	// Duration is the wall time from starting qemu to its exit.
	Duration time.Duration
}

// Image returns the image directory Config.ImageDir names, or vm/ in
// the bin dir ($NODEKIT_BIN_DIR, else the checkout's _output/bin), after
// checking that it holds the image's files.
func Image(dir string) (string, error) {
	if dir == "" {
		bin, err := localcp.FindBinDir()
		if err != nil {
			return "", fmt.Errorf("localvm: no image directory (set Config.ImageDir or $NODEKIT_BIN_DIR): %w", err)
		}
		dir = filepath.Join(bin, ImageSubdir)
	}
	for _, f := range []string{ImageFile, KernelFile, InitrdFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("localvm: guest image incomplete (run `make tools` or hack/build-vm.sh): %w", err)
		}
	}
	return dir, nil
}

// Available reports what this machine lacks to Run: qemu-system-x86_64,
// qemu-img, or the image in imageDir ("" as Config.ImageDir). KVM is not
// required (TCG runs without it).
func Available(imageDir string) error {
	var errs []error
	for _, b := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(b); err != nil {
			errs = append(errs, fmt.Errorf("localvm: %w (apt-get install qemu-system-x86 qemu-utils)", err))
		}
	}
	if _, err := Image(imageDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run boots the guest, runs cfg.Script in it and returns once the guest
// powered off. An error means the run itself failed (qemu could not
// start, the guest never ran the script or did not finish in time); a
// script that fails is a Result with a non-zero ExitCode.
func Run(ctx context.Context, cfg Config) (Result, error) {
	logger := klog.FromContext(ctx)
	cfg, err := withDefaults(cfg)
	if err != nil {
		return Result{}, err
	}
	res := Result{ConsoleLog: filepath.Join(cfg.WorkDir, "console.log"), Accel: cfg.Accel}
	if res.Accel == AccelAuto {
		res.Accel = AccelKVM
		if why := KVMUsable(sysRoot); why != nil {
			res.Accel = AccelTCG
			logger.Info("localvm: KVM cannot run the guest; falling back to TCG (CPU emulation, far slower)", "reason", why.Error())
		}
	}
	job := filepath.Join(cfg.WorkDir, "job")
	res, err = boot(ctx, cfg, res, job)
	if err != nil && qemuCrashedBeforeJob(err, job) {
		// qemu under TCG has been seen to abort (SIGABRT) a few seconds
		// into a boot, before the guest ran anything: the emulator's
		// fault, not the script's. One fresh boot more; a second crash,
		// or any failure once the script started, is the run's error.
		logger.Info("localvm: qemu died before the guest started the script; booting once more", "err", err.Error())
		res, err = boot(ctx, cfg, res, job)
	}
	return res, err
}

// boot runs qemu once on a fresh overlay and job share and collects what
// the guest left.
func boot(ctx context.Context, cfg Config, res Result, job string) (Result, error) {
	logger := klog.FromContext(ctx)
	if err := prepareJob(job, cfg); err != nil {
		return res, err
	}
	overlay := filepath.Join(cfg.WorkDir, "overlay.qcow2")
	_ = os.Remove(overlay)
	if out, err := exec.CommandContext(ctx, cfg.QEMUImg, "create", "-q", "-f", "qcow2", "-F", "raw",
		"-b", filepath.Join(cfg.ImageDir, ImageFile), overlay).CombinedOutput(); err != nil {
		return res, fmt.Errorf("localvm: create the overlay: %w: %s", err, out)
	}
	defer os.Remove(overlay)

	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	args := qemuArgs(cfg, res.Accel, overlay, res.ConsoleLog, job)
	logger.V(2).Info("localvm: starting qemu", "accel", res.Accel, "args", args)
	cmd := exec.CommandContext(runCtx, cfg.QEMU, args...)
	qemuLog, err := os.Create(filepath.Join(cfg.WorkDir, "qemu.log"))
	if err != nil {
		return res, fmt.Errorf("localvm: %w", err)
	}
	defer qemuLog.Close()
	cmd.Stdout, cmd.Stderr = qemuLog, qemuLog
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	runErr := cmd.Run()
	res.Duration = time.Since(start)
	logger.V(1).Info("localvm: qemu exited", "accel", res.Accel, "duration", res.Duration, "err", runErr)
	return collect(res, job, runErr, runCtx.Err(), cfg.Timeout)
}

// qemuCrashedBeforeJob reports whether err is qemu ending by a signal it
// did not get from Run (collect's qemuDied) while the guest had not
// started the script (no "started" file in the job share).
func qemuCrashedBeforeJob(err error, job string) bool {
	if !errors.Is(err, errQEMUDied) {
		return false
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return false
	}
	_, statErr := os.Stat(filepath.Join(job, "started"))
	return errors.Is(statErr, fs.ErrNotExist)
}

// withDefaults fills in cfg's defaults and checks what Run needs.
func withDefaults(cfg Config) (Config, error) {
	dir, err := Image(cfg.ImageDir)
	if err != nil {
		return cfg, err
	}
	cfg.ImageDir = dir
	if cfg.WorkDir == "" {
		return cfg, errors.New("localvm: Config.WorkDir is required")
	}
	if cfg.Script == "" {
		return cfg, errors.New("localvm: Config.Script is empty")
	}
	switch cfg.Accel {
	case AccelAuto, AccelKVM, AccelTCG:
	default:
		return cfg, fmt.Errorf("localvm: Config.Accel %q is none of %q, %q, %q", cfg.Accel, AccelAuto, AccelKVM, AccelTCG)
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = defaultMemoryMiB
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = defaultCPUs
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultTimeout
	}
	for i, s := range cfg.Shares {
		if !filepath.IsAbs(s.HostPath) {
			return cfg, fmt.Errorf("localvm: Config.Shares[%d].HostPath %q is not absolute", i, s.HostPath)
		}
		if s.GuestPath == "" {
			cfg.Shares[i].GuestPath = s.HostPath
		}
		if p := cfg.Shares[i].GuestPath; !filepath.IsAbs(p) || p == "/" || p == JobDir {
			return cfg, fmt.Errorf("localvm: Config.Shares[%d].GuestPath %q must be absolute, not / or %s", i, p, JobDir)
		}
	}
	for name, p := range map[string]*string{"qemu-system-x86_64": &cfg.QEMU, "qemu-img": &cfg.QEMUImg} {
		if *p != "" {
			continue
		}
		found, err := exec.LookPath(name)
		if err != nil {
			return cfg, fmt.Errorf("localvm: %w (apt-get install qemu-system-x86 qemu-utils)", err)
		}
		*p = found
	}
	return cfg, nil
}

// errQEMUDied marks collect's error for a qemu that exited on its own
// with a failure (not killed by Run's deadline or context).
var errQEMUDied = errors.New("localvm: qemu")

// collect reads what the guest left in the job share.
func collect(res Result, job string, runErr, ctxErr error, timeout time.Duration) (Result, error) {
	out, _ := os.ReadFile(filepath.Join(job, "output.log"))
	res.Output = string(out)
	if b, err := os.ReadFile(filepath.Join(job, "started")); err == nil {
		res.BootSeconds, _ = strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	}
	code, codeErr := os.ReadFile(filepath.Join(job, "exit-code"))
	switch {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return res, fmt.Errorf("localvm: the guest did not finish within %v; qemu killed (console: %s)", timeout, ConsoleTail(res.ConsoleLog, 30))
	case ctxErr != nil:
		return res, fmt.Errorf("localvm: %w; qemu killed", ctxErr)
	case runErr != nil:
		// The work dir may be gone by the time anyone looks (a test's
		// temp dir): qemu's own messages (an abort's reason) go in the error.
		qemuLog := filepath.Join(filepath.Dir(job), "qemu.log")
		return res, fmt.Errorf("%w: %w (qemu's output: %s; console: %s)", errQEMUDied, runErr, ConsoleTail(qemuLog, 20), ConsoleTail(res.ConsoleLog, 30))
	case codeErr != nil:
		return res, fmt.Errorf("localvm: the guest powered off without running the script to its end (no exit code: %w); console: %s", codeErr, ConsoleTail(res.ConsoleLog, 30))
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(code)))
	if err != nil {
		return res, fmt.Errorf("localvm: exit code %q: %w", code, err)
	}
	res.ExitCode = n
	return res, nil
}

// ConsoleTail is the last n lines of a console log, for messages.
func ConsoleTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
