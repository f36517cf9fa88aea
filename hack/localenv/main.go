// Command localenv starts and stops nodekit's local development
// environment: a detached etcd + kube-apiserver v1.37.2 on loopback ports
// (internal/localcp), kube-controller-manager and kube-scheduler when
// their binaries are built, and, on the node side, the container runtime.
//
//	go run ./hack/localenv up     [--dir DIR] [--node NAME]...
//	go run ./hack/localenv down   [--dir DIR]
//	go run ./hack/localenv status [--dir DIR]
//	go run ./hack/localenv demo   [--dir DIR] [--node NAME]
//
// demo waits for the node (an agent hack/run-agent.sh started) to be
// Ready, runs a demo static pod and a demo Deployment on it and waits for
// both to be Running. down also stops an agent run-agent.sh --background
// started (its pidfile DIR/agent/fullagent.pid).
//
// Both up and down are idempotent: up on a healthy environment says
// "already up", down on a stopped one says "already down". The control plane
// keeps its state in DIR/controlplane (admin.kubeconfig, node-NAME.kubeconfig,
// logs/); DIR/containerd is reserved for the runtime. hack/local-up.sh and
// hack/local-down.sh run this from the repository root.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodekit/nodekit/internal/fsutil"
	"github.com/nodekit/nodekit/internal/localcp"
	"github.com/nodekit/nodekit/internal/localcri"
)

const (
	defaultDir  = "_output/local"
	defaultNode = "nodekit-node" // hack/run-agent.sh's default
	stopTimeout = time.Minute
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "localenv: %v\n", err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `usage:
  localenv up     [--dir DIR] [--node NAME]...  start etcd + kube-apiserver (detached); idempotent
  localenv down   [--dir DIR]                   stop them; idempotent
  localenv status [--dir DIR]                   say whether they are up (exit 1 if not)
  localenv env    [--dir DIR] [--node NAME]     print shell exports for a running environment
  localenv demo   [--dir DIR] [--node NAME]     run a demo static pod and Deployment on the node
DIR defaults to %s.
`, defaultDir)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return errors.New("missing command")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("localenv "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", defaultDir, "state directory of the local environment")
	var nodes nodeList
	if cmd == "up" || cmd == "env" {
		fs.Var(&nodes, "node", "node name to create a client certificate and kubeconfig for (repeatable)")
	}
	demoNode := defaultNode
	if cmd == "demo" {
		fs.StringVar(&demoNode, "node", defaultNode, "the node to run the demo on")
	}
	switch cmd {
	case "up", "down", "status", "env", "demo":
	case "help", "-h", "--help":
		usage(stdout)
		return nil
	default:
		usage(stderr)
		return fmt.Errorf("unknown command %q", cmd)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", cmd, fs.Args())
	}
	switch cmd {
	case "up":
		return up(ctx, *dir, nodes, stdout, stderr)
	case "down":
		return down(ctx, *dir, stdout)
	case "env":
		return envVars(ctx, *dir, nodes, stdout)
	case "demo":
		return demo(ctx, *dir, demoNode, stdout)
	default:
		return status(ctx, *dir, stdout)
	}
}

// controlPlaneDir is where the control plane keeps its state: DIR/controlplane,
// absolute so messages name it unambiguously.
func controlPlaneDir(dir string) string {
	d := filepath.Join(dir, "controlplane")
	if abs, err := filepath.Abs(d); err == nil {
		return abs
	}
	return d
}

// up starts the control plane unless it is already up, then the runtime.
func up(ctx context.Context, dir string, nodes []string, stdout, stderr io.Writer) error {
	cpDir := controlPlaneDir(dir)
	cp, err := localcp.Attach(ctx, cpDir)
	if err == nil {
		fmt.Fprintf(stdout, "control plane already up at %s\n", cp.URL)
	} else {
		live, lerr := localcp.LiveProcesses(cpDir)
		if lerr != nil {
			return lerr
		}
		if len(live) > 0 {
			return fmt.Errorf("control plane in %s is running (%v) but not healthy: %w\nrun hack/local-down.sh (or localenv down) first", cpDir, live, err)
		}
		cp, err = localcp.Start(ctx, localcp.Config{Dir: cpDir, Detach: true, NodeNames: nodes, Log: stderr})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "control plane up at %s (logs in %s)\n", cp.URL, filepath.Join(cp.Dir, "logs"))
	}
	if err := upControllers(ctx, cp, stdout); err != nil {
		return err
	}
	for _, n := range nodes {
		path, err := cp.NodeKubeconfig(n)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "node %s kubeconfig: %s\n", n, path)
	}

	if err := upRuntime(ctx, dir, stdout); err != nil {
		return err
	}

	fmt.Fprintf(stdout, "admin kubeconfig: %s\n", cp.AdminKubeconfig)
	fmt.Fprintf(stdout, "  export KUBECONFIG=%s\n", cp.AdminKubeconfig)
	return nil
}

// down stops the agent, the runtime, then the control plane. Once the
// agent and the runtime are stopped it detaches what the agent left
// mounted under its directory (its root's bind mount, the pods' volumes),
// so that `make clean` can remove it.
func down(ctx context.Context, dir string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	if err := downAgent(ctx, dir, stdout); err != nil {
		return err
	}
	if err := downRuntime(ctx, dir, stdout); err != nil {
		return err
	}
	agentDir := filepath.Join(dir, "agent")
	done, err := fsutil.UnmountBelow(agentDir)
	if len(done) > 0 {
		fmt.Fprintf(stdout, "unmounted %d mounts the agent left under %s\n", len(done), agentDir)
	}
	if err != nil {
		return err
	}
	cpDir := controlPlaneDir(dir)
	live, err := localcp.LiveProcesses(cpDir)
	if err != nil {
		return err
	}
	if err := localcp.StopDir(ctx, cpDir); err != nil { // also clears stale pidfiles
		return err
	}
	if len(live) == 0 {
		fmt.Fprintf(stdout, "control plane already down (%s)\n", cpDir)
		return nil
	}
	fmt.Fprintf(stdout, "control plane stopped (%s)\n", describe(live))
	return nil
}

func status(ctx context.Context, dir string, stdout io.Writer) error {
	cpDir := controlPlaneDir(dir)
	cp, err := localcp.Attach(ctx, cpDir)
	if err != nil {
		return fmt.Errorf("control plane not up: %w", err)
	}
	live, err := localcp.LiveProcesses(cpDir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "control plane up at %s (%s)\nadmin kubeconfig: %s\n", cp.URL, describe(live), cp.AdminKubeconfig)
	return nil
}

// upRuntime starts the node side of the environment, a private containerd
// with the test images, in DIR/containerd (detached), unless it is up.
func upRuntime(ctx context.Context, dir string, stdout io.Writer) error {
	crDir := runtimeDir(dir)
	want, err := localcri.ResolveVersion("") // $NODEKIT_CONTAINERD
	if err != nil {
		return err
	}
	c, err := localcri.Attach(ctx, crDir)
	if err == nil {
		if c.Version != want {
			return fmt.Errorf("containerd %s is up in %s, but $%s asks for %s: run hack/local-down.sh first",
				c.Version, crDir, localcri.VersionEnv, want)
		}
		fmt.Fprintf(stdout, "containerd %s already up: %s (pod bridge %s, node IP %s)\n", c.RuntimeVersion, c.Endpoint, c.Bridge, c.Gateway)
		return nil
	}
	c, err = localcri.Start(ctx, localcri.Config{Dir: crDir, Detach: true, Version: want})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "containerd %s up: %s (pod bridge %s, node IP %s)\n", c.RuntimeVersion, c.Endpoint, c.Bridge, c.Gateway)
	return nil
}

// downRuntime stops what upRuntime started; it is idempotent too.
func downRuntime(ctx context.Context, dir string, stdout io.Writer) error {
	err := localcri.StopDir(ctx, runtimeDir(dir))
	switch {
	case errors.Is(err, localcri.ErrNoInstance):
		fmt.Fprintln(stdout, "containerd already down")
		return nil
	case err != nil:
		return err
	}
	fmt.Fprintln(stdout, "containerd stopped")
	return nil
}

func runtimeDir(dir string) string {
	d := filepath.Join(dir, "containerd")
	if abs, err := filepath.Abs(d); err == nil {
		return abs
	}
	return d
}

// envVars prints shell exports describing a running environment, for
// scripts: the admin kubeconfig, the CRI endpoint, the node IP (the pod
// bridge's gateway), the cluster CA (which signs the API server's client
// certificate for the node API) and, per --node, that node's kubeconfig.
func envVars(ctx context.Context, dir string, nodes []string, stdout io.Writer) error {
	cp, err := localcp.Attach(ctx, controlPlaneDir(dir))
	if err != nil {
		return fmt.Errorf("control plane not up: %w", err)
	}
	c, err := localcri.Attach(ctx, runtimeDir(dir))
	if err != nil {
		return fmt.Errorf("containerd not up: %w", err)
	}
	fmt.Fprintf(stdout, "export KUBECONFIG=%s\nexport NODEKIT_CRI_ENDPOINT=%s\nexport NODEKIT_NODE_IP=%s\nexport NODEKIT_CA_FILE=%s\n",
		cp.AdminKubeconfig, c.Endpoint, c.Gateway, cp.CAFile)
	for _, n := range nodes {
		path, err := cp.NodeKubeconfig(n)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "export NODEKIT_NODE_KUBECONFIG=%s\n", path)
	}
	return nil
}

func describe(ps []localcp.Process) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s pid %d", p.Name, p.PID)
	}
	return strings.Join(parts, ", ")
}

// nodeList is a repeatable --node flag.
type nodeList []string

func (l *nodeList) String() string { return strings.Join(*l, ",") }

func (l *nodeList) Set(v string) error {
	if v == "" {
		return errors.New("empty node name")
	}
	*l = append(*l, v)
	return nil
}
