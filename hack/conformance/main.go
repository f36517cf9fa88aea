// Command conformance runs the upstream node conformance tests (e2e.test
// v1.37.2, NodeConformance specs) against a single-node local cluster whose
// node is fullagent — or, with --agent=kubelet, the upstream kubelet
// v1.37.2 on the same machine and runtime, for comparison.
//
//	bash hack/conformance.sh [--agent=fullagent|kubelet] [--containerd=1.6|2] [--features|--gated-only] [--procs=12] [--focus=REGEX]
//	go run ./hack/conformance compare DIR_A DIR_B
//
// --features adds the feature-gated NodeConformance specs of every gate
// that is on by default in v1.37 (the e2e framework labels the specs of
// gates off by default Feature:OffByDefault, and alpha ones Alpha; both
// stay out); --gated-only runs just those feature-gated specs. Each run
// writes its report to OUT/AGENT-containerdVERSION (with -features or
// -gated when given): junit.xml, logs/ and specs.txt, one
// "passed|failed|skipped<TAB>spec" line per spec, sorted by spec. compare
// prints the specs DIR_B passed and DIR_A did not, from their specs.txt.
//
// It starts etcd + kube-apiserver (internal/localcp), kube-controller-manager
// and kube-scheduler, a private containerd with the test images
// (internal/localcri), and the agent; waits for the node to be Ready; runs
// ginkgo with the label filter of ENVIRONMENT.md and the skips listed in
// hack/conformance-skips.txt; writes a JUnit report and prints
// "N passed, N failed, N skipped". Everything listens on loopback or on the
// harness's own pod bridge and is stopped when it ends.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/internal/cgroot"
	"github.com/nodekit/nodekit/internal/fsutil"
	"github.com/nodekit/nodekit/internal/kubeletconf"
	"github.com/nodekit/nodekit/internal/localcp"
	"github.com/nodekit/nodekit/internal/localcri"
)

const nodeName = "conformance-node"

// labelFilter selects the specs of a run; featuresFilter also lets in the
// specs of feature gates on by default; gatedFilter lets in only those.
const (
	labelFilter    = `NodeConformance && !Serial && !Disruptive && !Flaky && !Alpha && !/FeatureGate:/ && !/^Feature:/`
	featuresFilter = `NodeConformance && !Serial && !Disruptive && !Flaky && !Alpha && !BetaOffByDefault && !/^Feature:/`
	gatedFilter    = `(` + featuresFilter + `) && /FeatureGate:/`
)

// options are the command line of a run.
type options struct {
	agent, containerd, focus, out string
	procs                         int
	keep, features, gatedOnly     bool
}

// specSet is the set of specs the options select: "" (the non-gated
// ones), "features" (those and the gated ones of gates on by default) or
// "gated" (only the gated ones); it names the report directory too.
func (o options) specSet() (string, error) {
	switch {
	case o.gatedOnly && o.features:
		return "", errors.New("--gated-only and --features exclude each other")
	case o.gatedOnly:
		return "gated", nil
	case o.features:
		return "features", nil
	}
	return "", nil
}

// filterFor is the ginkgo label filter of a spec set.
func filterFor(set string) string {
	switch set {
	case "features":
		return featuresFilter
	case "gated":
		return gatedFilter
	}
	return labelFilter
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "compare" {
		if len(os.Args) != 4 {
			fmt.Fprintln(os.Stderr, "usage: conformance compare DIR_A DIR_B")
			os.Exit(2)
		}
		if err := compare(os.Stdout, os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "conformance:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.StringVar(&o.agent, "agent", "fullagent", "the node agent: fullagent or kubelet")
	flag.IntVar(&o.procs, "procs", 12, "ginkgo parallel processes")
	flag.StringVar(&o.focus, "focus", "", "run only specs matching this regex")
	flag.StringVar(&o.out, "out", "_output/conformance", "report directory")
	flag.BoolVar(&o.keep, "keep", false, "leave the cluster running after the tests (for debugging)")
	flag.BoolVar(&o.features, "features", false, "also run the feature-gated specs of gates on by default in v1.37")
	flag.BoolVar(&o.gatedOnly, "gated-only", false, "run only the feature-gated specs of gates on by default in v1.37")
	flag.StringVar(&o.containerd, "containerd", "", "containerd the node runs: 1.6 or 2 (default $NODEKIT_CONTAINERD, else 1.6)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	agent, procs, focus, keep := o.agent, o.procs, o.focus, o.keep
	if agent != "fullagent" && agent != "kubelet" {
		return fmt.Errorf("--agent=%q: want fullagent or kubelet", agent)
	}
	set, err := o.specSet()
	if err != nil {
		return err
	}
	containerd, err := localcri.ResolveVersion(o.containerd)
	if err != nil {
		return fmt.Errorf("--containerd: %w", err)
	}
	bin, err := localcp.FindBinDir()
	if err != nil {
		return err
	}
	for _, b := range []string{"kube-controller-manager", "kube-scheduler", "e2e.test", "ginkgo", "kubelet"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return fmt.Errorf("%s missing in %s: run bash hack/build-tools.sh conformance", b, bin)
		}
	}
	out, _ := filepath.Abs(filepath.Join(o.out, reportName(agent, containerd, set)))
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nkconf-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
		// After the agent stopped (stopProcs, below, runs first): its
		// root's bind mount and its pods' volumes stay mounted otherwise.
		defer func() {
			if _, err := fsutil.UnmountBelow(dir); err != nil {
				fmt.Fprintln(os.Stderr, "conformance:", err)
			}
		}()
	}
	var procsToStop []*exec.Cmd
	stopProcs := func() {
		if keep {
			fmt.Println("conformance: --keep: cluster left running in", dir)
			return
		}
		for i := len(procsToStop) - 1; i >= 0; i-- {
			_ = procsToStop[i].Process.Signal(syscall.SIGTERM)
			_ = procsToStop[i].Wait()
		}
		procsToStop = nil
	}
	defer stopProcs()

	cp, err := localcp.Start(ctx, localcp.Config{Dir: filepath.Join(dir, "cp"), NodeNames: []string{nodeName}, Log: os.Stderr})
	if err != nil {
		return err
	}
	if !keep {
		defer func() { _ = cp.Stop(context.WithoutCancel(ctx)) }()
	}
	cri, err := localcri.Start(ctx, localcri.Config{Dir: filepath.Join(dir, "cri"), Version: containerd, ConformanceImages: true})
	if err != nil {
		return err
	}
	fmt.Printf("conformance: node runtime containerd %s (%s)\n", cri.RuntimeVersion, cri.Version)
	if !keep {
		defer func() { _ = cri.Stop(context.WithoutCancel(ctx)) }()
	}
	logs := filepath.Join(out, "logs")
	_ = os.MkdirAll(logs, 0o755)
	start := func(path string, args ...string) error {
		name := filepath.Base(path)
		cmd := exec.Command(path, args...)
		f, err := os.Create(filepath.Join(logs, name+".log"))
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		procsToStop = append(procsToStop, cmd)
		return nil
	}
	if err := start(filepath.Join(bin, "kube-controller-manager"), "--kubeconfig="+cp.AdminKubeconfig,
		"--controllers=*,-nodeipam", "--use-service-account-credentials=true",
		"--service-account-private-key-file="+cp.ServiceAccountKeyFile, "--root-ca-file="+cp.CAFile,
		"--cluster-signing-cert-file="+cp.CAFile, "--cluster-signing-key-file="+cp.CAKeyFile,
		"--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false"); err != nil {
		return err
	}
	if err := start(filepath.Join(bin, "kube-scheduler"), "--kubeconfig="+cp.AdminKubeconfig, "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false"); err != nil {
		return err
	}
	nodeKubeconfig, err := cp.NodeKubeconfig(nodeName)
	if err != nil {
		return err
	}
	// The agent's kubepods tree lives under a cgroup of this run's own, so
	// its orphaned-pod cleanup cannot meet another agent's pods.
	cgRoot, err := cgroot.Create(fmt.Sprintf("nkconf-%s-%d", agent, os.Getpid()))
	if err != nil {
		return fmt.Errorf("cgroup root: %w", err)
	}
	if !keep {
		defer func() {
			// The agents first, or a kubelet recreates its QoS cgroups
			// under the root being removed.
			stopProcs()
			_ = cgRoot.Remove()
		}()
	}
	root := filepath.Join(dir, "agent")
	if err := startAgent(agent, bin, root, nodeKubeconfig, cp.CAFile, cri, cgRoot.Name, start); err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cp.Admin)
	if err != nil {
		return err
	}
	if err := waitReady(ctx, client); err != nil {
		return err
	}
	skips, err := readSkips("hack/conformance-skips.txt")
	if err != nil {
		return err
	}
	args := []string{"run", "-p", fmt.Sprintf("--procs=%d", procs), "--label-filter=" + filterFor(set),
		"--junit-report=junit.xml", "--output-dir=" + out, "--timeout=80m", "--no-color"}
	if len(skips) > 0 {
		args = append(args, "--skip="+strings.Join(skips, "|"))
	}
	if focus != "" {
		args = append(args, "--focus="+focus)
	}
	args = append(args, filepath.Join(bin, "e2e.test"), "--", "--kubeconfig="+cp.AdminKubeconfig,
		"--provider=local", "--num-nodes=1", "--report-dir="+out, "--node-os-distro=debian")
	g := exec.CommandContext(ctx, filepath.Join(bin, "ginkgo"), args...)
	g.Stdout, g.Stderr = os.Stdout, os.Stderr
	g.Env = append(os.Environ(), "KUBECONFIG="+cp.AdminKubeconfig)
	runErr := g.Run()
	specs, err := readJUnit(filepath.Join(out, "junit.xml"))
	if err != nil {
		return errors.Join(runErr, err)
	}
	if err := writeSpecs(filepath.Join(out, "specs.txt"), specs); err != nil {
		return errors.Join(runErr, err)
	}
	passed, failed, skipped := count(specs)
	fmt.Printf("conformance (%s): %d passed, %d failed, %d skipped\n", agent, passed, failed, skipped)
	fmt.Printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	return nil
}

// startAgent starts fullagent (built from this checkout) or the upstream
// kubelet as the cluster's only node.
func startAgent(agent, bin, root, kubeconfig, caFile string, cri *localcri.Containerd, cgroupRoot string, start func(string, ...string) error) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	cfg := filepath.Join(root, "config.yaml")
	common := kubeletconf.Common(kubeletconf.Node{PodLogsDir: filepath.Join(root, "logs"), RuntimeEndpoint: cri.Endpoint,
		Address: cri.Gateway.String(), CgroupRoot: cgroupRoot, ClientCAFile: caFile})
	if agent == "kubelet" {
		common += "failCgroupV1: false\nfailSwapOn: false\nserializeImagePulls: false\n"
	}
	if err := os.WriteFile(cfg, []byte(common), 0o644); err != nil {
		return err
	}
	args := kubeletconf.Args(kubeconfig, cfg, nodeName, cri.Gateway.String(), filepath.Join(root, "root"))
	if agent == "kubelet" {
		return start(filepath.Join(bin, "kubelet"), args...)
	}
	fa := filepath.Join(filepath.Dir(root), "fullagent")
	b := exec.Command("go", "build", "-o", fa, "./examples/fullagent")
	b.Stdout, b.Stderr = os.Stderr, os.Stderr
	if err := b.Run(); err != nil {
		return fmt.Errorf("build fullagent: %w", err)
	}
	return start(fa, args...)
}

func waitReady(ctx context.Context, client kubernetes.Interface) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("node %s not Ready within 2 minutes", nodeName)
}

// readSkips reads one regex per line; text after " # " is the reason.
func readSkips(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		re, _, _ := strings.Cut(line, " # ")
		out = append(out, strings.TrimSpace(re))
	}
	return out, sc.Err()
}
