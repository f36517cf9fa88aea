package localvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodekit/nodekit/internal/localcp"
)

// guestSuite is a package whose tests run in the guest: the test binary
// (go test -c), the tests to run, and those that must pass there (not
// skip: the guest is the host they wait for).
type guestSuite struct {
	pkg      string
	run      string
	mustPass []string
	// maySkip are the tests (or subtests) that may skip when the run is
	// strict; any other skip then fails it.
	maySkip []string
}

// guestRun is one boot that runs suites: env is added to each suite's
// environment (with NODEKIT_REQUIRE_INTEGRATION=1 and the bin dir),
// kernelArgs to the guest's command line, and preamble runs first (its
// output is logged; a failure there fails the run).
type guestRun struct {
	suites     []guestSuite
	env        string
	kernelArgs []string
	preamble   string
	// strict fails the run on any skip but a suite's maySkip.
	strict bool
	// commands are built on the host (go build, CGO_ENABLED=0) for tests
	// that would build them in the guest, which has no go command: each
	// environment variable is set to its package's binary.
	commands map[string]string
}

// runGuestSuites builds the test binaries of r.suites on the host,
// boots the guest and runs them there as root with
// $NODEKIT_REQUIRE_INTEGRATION set; it fails with a suite's output when
// the suite fails or a test that must pass did not. It returns the
// guest's output (the preamble's, then each suite's summary).
func runGuestSuites(ctx context.Context, t *testing.T, r guestRun) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go (to build the test binaries): %v", err)
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	module := filepath.Dir(strings.TrimSpace(string(out)))
	work := t.TempDir()
	start := time.Now()
	for _, s := range r.suites {
		build := exec.Command(goBin, "test", "-c", "-o", filepath.Join(work, testBinary(s.pkg)), "./"+s.pkg)
		build.Dir = module
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go test -c ./%s: %v\n%s", s.pkg, err, out)
		}
	}
	env := "NODEKIT_REQUIRE_INTEGRATION=1 " + r.env
	for name, pkg := range r.commands {
		bin := filepath.Join(work, filepath.Base(pkg))
		build := exec.Command(goBin, "build", "-o", bin, pkg)
		build.Dir, build.Env = module, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
		env += " " + name + "=" + shq(bin)
	}
	t.Logf("built %d test binaries and %d commands in %v", len(r.suites), len(r.commands), time.Since(start).Round(time.Second))

	shares := []Share{{HostPath: module, ReadOnly: true}, {HostPath: work}}
	// The bin dir (busybox and runc's test bundle, ...) at the same path.
	if bin, err := localcp.FindBinDir(); err == nil {
		if _, err := os.Stat(bin); err == nil {
			shares = append(shares, Share{HostPath: bin, ReadOnly: true})
			env += " NODEKIT_BIN_DIR=" + shq(bin)
		}
	}
	script := "set -e\n" + r.preamble + "\nset +e\n" + suiteScript(r.suites, module, work, env)
	res, err := Run(ctx, Config{WorkDir: t.TempDir(), Script: script, Shares: shares,
		KernelArgs: r.kernelArgs, Timeout: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest (%s) ran the suites: the script started %.0fs after boot, the run took %v\n%s",
		res.Accel, res.BootSeconds, res.Duration.Round(time.Second), res.Output)
	if res.ExitCode != 0 {
		t.Fatalf("the guest's script failed (exit %d) before or between the suites", res.ExitCode)
	}
	for _, s := range r.suites {
		log, err := os.ReadFile(filepath.Join(work, testBinary(s.pkg)+".log"))
		if err != nil {
			t.Errorf("%s: no output from the guest: %v", s.pkg, err)
			continue
		}
		rc, _ := os.ReadFile(filepath.Join(work, testBinary(s.pkg)+".rc"))
		if strings.TrimSpace(string(rc)) != "0" {
			t.Errorf("%s failed in the guest (exit %s):\n%s", s.pkg, strings.TrimSpace(string(rc)), log)
			continue
		}
		for _, name := range s.mustPass {
			if !regexp.MustCompile(`(?m)^\s*--- PASS: ` + regexp.QuoteMeta(name) + ` `).Match(log) {
				t.Errorf("%s: %s did not pass in the guest:\n%s", s.pkg, name, log)
			}
		}
		for _, m := range regexp.MustCompile(`(?m)^\s*--- SKIP: (\S+) `).FindAllSubmatch(log, -1) {
			if r.strict && !slices.Contains(s.maySkip, string(m[1])) {
				t.Errorf("%s: %s skipped in the guest:\n%s", s.pkg, m[1], log)
			}
		}
	}
	return res.Output
}

// testBinary is the file name of pkg's test binary (a/b: a_b.test).
func testBinary(pkg string) string { return strings.ReplaceAll(pkg, "/", "_") + ".test" }

// suiteScript runs each suite's binary in its package directory (for
// testdata) with its output and exit status in work.
func suiteScript(suites []guestSuite, module, work, env string) string {
	var b strings.Builder
	for _, s := range suites {
		bin := filepath.Join(work, testBinary(s.pkg))
		fmt.Fprintf(&b, "echo \"== %s\"\n", s.pkg)
		fmt.Fprintf(&b, "(cd %s && env %s %s -test.v -test.count=1 -test.timeout=10m -test.run %s) >%s 2>&1; echo $? >%s\n",
			shq(filepath.Join(module, s.pkg)), env, shq(bin), shq(s.run), shq(bin+".log"), shq(bin+".rc"))
		fmt.Fprintf(&b, "grep -E '^ *(--- |ok|FAIL|PASS)|^ +[a-z_0-9]+_test.go:[0-9]+: ' %s\n", shq(bin+".log"))
	}
	return b.String()
}
