// Command conformance runs the upstream node conformance tests (e2e.test
// v1.37.2, NodeConformance specs) against a single-node local cluster whose
// node is fullagent — or, with --agent=kubelet, the upstream kubelet
// v1.37.2 on the same machine and runtime, for comparison.
//
//	bash hack/conformance.sh [--agent=fullagent|kubelet] [--containerd=1.6|2] [--features|--gated-only|--dra] [--serial] [--procs=12] [--focus=REGEX]
//	go run ./hack/conformance compare DIR_A DIR_B
//	go run ./hack/conformance table DIR...
//	go run ./hack/conformance specs DIR
//
// --features adds the feature-gated NodeConformance specs of every gate
// that is on by default in v1.37 (the e2e framework labels the specs of
// gates off by default Feature:OffByDefault, and alpha ones Alpha; both
// stay out); --gated-only runs just those feature-gated specs. Each run
// writes its report to OUT/AGENT-containerdVERSION (with -features or
// -gated when given; -serial or -serial-features with --serial):
// junit.xml, logs/ and specs.txt, one
// "passed|failed|skipped<TAB>spec" line per spec, sorted by spec. compare
// prints the specs DIR_B passed and DIR_A did not, from their specs.txt.
// Each run also writes run.json: the agent, the runtime, the spec set, the
// checkout's commit (and whether it had uncommitted changes), start and end
// time and the counts. table prints the README's markdown table from
// report directories (refusing runs of a checkout with uncommitted
// changes); specs rewrites DIR/specs.txt from DIR/junit.xml (for reports
// written before specs.txt left out the specs a run did not select);
// hack/conformance/results keeps the runs the README's tables
// are made from, and TestReadmeTables checks the README against them.
//
// --serial runs the NodeConformance specs labelled Serial (with --features
// also the gated ones of gates on by default), which the other sets leave
// out, in one ginkgo process (--procs is ignored). In e2e.test v1.37.2 they
// are the four image-pull specs of the Container Runtime blackbox test
// ("when running a container with a new image"). For them the harness
// starts the CNCF distribution registry on loopback (internal/localregistry,
// TLS from its own CA, log in logs/registry.log), pushes every local image
// to it under its upstream name and makes it containerd's only host for
// registry.k8s.io and the other localcri.MirroredRegistries, so a pull with
// imagePullPolicy Always goes over the wire; the images are still imported
// beforehand for IfNotPresent. localhost:5000 is pulled over plain HTTP,
// where the private-registry specs run agnhost's fake-registry-server in a
// hostNetwork pod (the local agnhost image carries its /var/registry). Any
// other registry name still resolves to a closed port on 127.0.0.1.
//
// --dra runs upstream's "[sig-node] DRA" specs (test/e2e/dra) of gates on
// by default instead (report directory -dra; with --serial their Serial
// ones, -dra-serial), on containerd 2 only: see dra.go.
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

	"github.com/nodekit/nodekit/internal/kubeletconf"
	"github.com/nodekit/nodekit/internal/localcri"
)

const nodeName = "conformance-node"

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
	if len(os.Args) == 3 && os.Args[1] == "specs" {
		if err := rescan(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "conformance:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "table" {
		if len(os.Args) < 3 {
			fmt.Fprintln(os.Stderr, "usage: conformance table DIR...")
			os.Exit(2)
		}
		if err := table(os.Stdout, os.Args[2:]); err != nil {
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
	flag.BoolVar(&o.serial, "serial", false, "run the Serial specs instead, in one process, with a local registry for their pulls")
	flag.BoolVar(&o.dra, "dra", false, "run the [sig-node] DRA specs instead (containerd 2; with --serial their Serial ones)")
	flag.StringVar(&o.containerd, "containerd", "", "containerd the node runs: 1.6 or 2 (default $NODEKIT_CONTAINERD, else 1.6)")
	flag.DurationVar(&o.timeout, "timeout", 80*time.Minute, "ginkgo's limit for the whole run (a --features run takes longer than the default on 2 cores)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

// startAgent starts fullagent (built from this checkout) or the upstream
// kubelet as the cluster's only node: its config, logs and binary in root,
// its --root-dir rootDir.
func startAgent(agent, bin, root, rootDir, kubeconfig, caFile string, cri *localcri.Containerd, cgroupRoot string, start func(string, ...string) error) error {
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
	args := kubeletconf.Args(kubeconfig, cfg, nodeName, cri.Gateway.String(), rootDir)
	if agent == "kubelet" {
		return start(filepath.Join(bin, "kubelet"), args...)
	}
	fa := filepath.Join(filepath.Dir(root), "fullagent")
	// As upstream builds its release kubelet (examples/fullagent/main.go).
	b := exec.Command("go", "build", "-trimpath", "-tags", "selinux,notest,grpcnotrace", "-o", fa, "./examples/fullagent")
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
