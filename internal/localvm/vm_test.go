package localvm

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestKVMUsable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   []string
		wantErr string
	}{
		{"intel", []string{"dev/kvm", "sys/module/kvm/x", "sys/module/kvm_intel/x"}, ""},
		{"amd", []string{"dev/kvm", "sys/module/kvm_amd/x"}, ""},
		{"pvm only", []string{"dev/kvm", "sys/module/kvm/x", "sys/module/kvm_pvm/x"}, "PVM"},
		{"no hardware", []string{"dev/kvm", "sys/module/kvm/x"}, "neither kvm_intel nor kvm_amd"},
		{"no device", []string{"sys/module/kvm_intel/x"}, "open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := KVMUsable(root)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("KVMUsable = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("KVMUsable = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestQEMUArgs(t *testing.T) {
	cfg := Config{ImageDir: "/img", MemoryMiB: 1024, CPUs: 2, KernelArgs: []string{"quiet"},
		Shares: []Share{{HostPath: "/bin-dir", GuestPath: "/bin-dir", ReadOnly: true}, {HostPath: "/out", GuestPath: "/results"}}}
	args := qemuArgs(cfg, AccelTCG, "/w/overlay.qcow2", "/w/console.log", "/w/job")
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"-nodefaults", "-nic none", "-no-reboot", "-serial file:/w/console.log",
		"-kernel /img/vmlinuz", "-initrd /img/initrd.img",
		"file=/w/overlay.qcow2,if=virtio,format=qcow2",
		"-accel tcg,thread=multi",
		"local,id=fsdev0,path=/w/job,security_model=none -device virtio-9p-pci,fsdev=fsdev0,mount_tag=nodekit",
		"local,id=fsdev1,path=/bin-dir,security_model=none,readonly=on -device virtio-9p-pci,fsdev=fsdev1,mount_tag=share0",
		"local,id=fsdev2,path=/out,security_model=none -device virtio-9p-pci,fsdev=fsdev2,mount_tag=share1",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("qemu args lack %q:\n%s", want, joined)
		}
	}
	// No network device of any kind, nothing but the disk, the shares
	// and the entropy source.
	for i, a := range args {
		if a == "-netdev" || (a == "-nic" && args[i+1] != "none") || strings.Contains(a, "virtio-net") || strings.HasPrefix(a, "user") {
			t.Errorf("qemu args give the guest a network: %q", a)
		}
		if a == "-device" && !strings.HasPrefix(args[i+1], "virtio-9p-pci") && args[i+1] != "virtio-rng-pci" {
			t.Errorf("unexpected device %q", args[i+1])
		}
	}
	i := slices.Index(args, "-append")
	if i < 0 {
		t.Fatal("no -append")
	}
	for _, want := range []string{"root=/dev/vda", "console=ttyS0", "systemd.unified_cgroup_hierarchy=1", "psi=1", "panic=-1", "quiet"} {
		if !slices.Contains(strings.Fields(args[i+1]), want) {
			t.Errorf("kernel command line %q lacks %s", args[i+1], want)
		}
	}
	if kvm := strings.Join(qemuArgs(cfg, AccelKVM, "o", "c", "j"), " "); !strings.Contains(kvm, "-accel kvm -cpu host") {
		t.Errorf("KVM args: %s", kvm)
	}
}

func TestGuestScript(t *testing.T) {
	s := guestScript([]Share{{HostPath: "/a", GuestPath: "/it's", ReadOnly: true}, {HostPath: "/b", GuestPath: "/b"}})
	for _, want := range []string{
		"exec >/nodekit/output.log 2>&1",
		`mkdir -p '/it'\''s' && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose,ro share0 '/it'\''s'`,
		"mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none share1 '/b'",
		"cd /nodekit && /bin/sh /nodekit/job.sh\necho $? >/nodekit/exit-code.tmp && mv /nodekit/exit-code.tmp /nodekit/exit-code",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("guest script lacks %q:\n%s", want, s)
		}
	}
	if strings.Index(s, "started") > strings.Index(s, "job.sh") {
		t.Error("the start time is written after the job ran")
	}
}

func TestConfigChecks(t *testing.T) {
	img := t.TempDir()
	for _, f := range []string{ImageFile, KernelFile, InitrdFile} {
		if err := os.WriteFile(filepath.Join(img, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ok := Config{ImageDir: img, WorkDir: t.TempDir(), Script: "true", QEMU: "q", QEMUImg: "qi"}
	got, err := withDefaults(ok)
	if err != nil {
		t.Fatal(err)
	}
	if got.MemoryMiB != defaultMemoryMiB || got.CPUs != defaultCPUs || got.Timeout != defaultTimeout {
		t.Errorf("defaults: %+v", got)
	}
	for name, mod := range map[string]func(*Config){
		"no image":       func(c *Config) { c.ImageDir = t.TempDir() },
		"no work dir":    func(c *Config) { c.WorkDir = "" },
		"no script":      func(c *Config) { c.Script = "" },
		"bad accel":      func(c *Config) { c.Accel = "hvf" },
		"relative share": func(c *Config) { c.Shares = []Share{{HostPath: "rel", GuestPath: "/rel"}} },
		"share on job":   func(c *Config) { c.Shares = []Share{{HostPath: "/x", GuestPath: JobDir}} },
	} {
		c := ok
		mod(&c)
		if _, err := withDefaults(c); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestSELinuxPermissive: SELinuxPermissive's arguments put SELinux on the
// guest's command line, permissive; a run without them has none.
func TestSELinuxPermissive(t *testing.T) {
	cmdline := func(extra []string) []string {
		args := qemuArgs(Config{ImageDir: "/img", KernelArgs: extra}, AccelTCG, "o", "c", "j")
		return strings.Fields(args[slices.Index(args, "-append")+1])
	}
	with, without := cmdline(SELinuxPermissive()), cmdline(nil)
	for _, want := range []string{"security=selinux", "selinux=1", "enforcing=0"} {
		if !slices.Contains(with, want) {
			t.Errorf("SELinux command line %q lacks %s", with, want)
		}
		if slices.Contains(without, want) {
			t.Errorf("default command line %q has %s", without, want)
		}
	}
}

// A qemu that dies (an abort, say) fails the run with what qemu printed
// and the console's last lines in the error, since the work dir holding
// them may be removed before anyone reads it.
func TestCollectQEMUFailure(t *testing.T) {
	work := t.TempDir()
	job := filepath.Join(work, "job")
	if err := os.MkdirAll(job, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "qemu.log"), []byte("qemu-system-x86_64: ../tcg/tcg.c:42: some_function: Assertion `x' failed.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	console := filepath.Join(work, "console.log")
	if err := os.WriteFile(console, []byte("[    1.2] PCI host bridge to bus 0000:00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := collect(Result{ConsoleLog: console}, job, errors.New("signal: aborted"), nil, time.Minute)
	if err == nil {
		t.Fatal("collect after qemu died: no error")
	}
	for _, want := range []string{"signal: aborted", "Assertion `x' failed", "PCI host bridge"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// fakeQEMU is a qemu-system-x86_64 stand-in: it aborts itself (SIGABRT)
// on each of its first `crashes` runs, before the guest would start;
// after that it "runs" the job: started, then exit code 0. fakeQEMUImg
// creates the overlay file.
func fakeQEMU(t *testing.T, crashes int) (qemu, qemuImg string) {
	dir := t.TempDir()
	qemu = filepath.Join(dir, "qemu")
	script := `#!/bin/sh
n=$(cat ` + dir + `/runs 2>/dev/null || echo 0)
echo $((n + 1)) >` + dir + `/runs
for a in "$@"; do
  case "$a" in *id=fsdev0,path=*) job=${a#*id=fsdev0,path=}; job=${job%%,*};; esac
done
if [ "$n" -lt ` + strconv.Itoa(crashes) + ` ]; then
  echo "qemu: fake assertion failed" >&2
  kill -ABRT $$
fi
echo 1.5 >"$job/started"
echo guest output >"$job/output.log"
echo 0 >"$job/exit-code"
`
	qemuImg = filepath.Join(dir, "qemu-img")
	img := "#!/bin/sh\nfor a in \"$@\"; do last=$a; done\n: >\"$last\"\n"
	for p, body := range map[string]string{qemu: script, qemuImg: img} {
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return qemu, qemuImg
}

// One qemu crash before the guest starts the script is booted through
// again; two are the run's error, with qemu's own output in it.
func TestRunRebootsAfterQEMUCrash(t *testing.T) {
	img := t.TempDir()
	for _, f := range []string{ImageFile, KernelFile, InitrdFile} {
		if err := os.WriteFile(filepath.Join(img, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		crashes int
		ok      bool
	}{{0, true}, {1, true}, {2, false}} {
		qemu, qemuImg := fakeQEMU(t, tc.crashes)
		res, err := Run(t.Context(), Config{ImageDir: img, WorkDir: t.TempDir(), Script: "true", QEMU: qemu, QEMUImg: qemuImg,
			Accel: AccelTCG, Timeout: time.Minute})
		runs, _ := os.ReadFile(filepath.Join(filepath.Dir(qemu), "runs"))
		wantRuns := min(tc.crashes, 1) + 1
		if strings.TrimSpace(string(runs)) != strconv.Itoa(wantRuns) {
			t.Errorf("%d crashes: qemu ran %q times, want %d", tc.crashes, runs, wantRuns)
		}
		if tc.ok {
			if err != nil || res.ExitCode != 0 || res.Output != "guest output\n" {
				t.Errorf("%d crashes: Run = %+v, %v; want the job's result", tc.crashes, res, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "fake assertion failed") || !strings.Contains(err.Error(), "aborted") {
			t.Errorf("%d crashes: Run error %v, want qemu's abort with its output", tc.crashes, err)
		}
	}
}
