// Command dratest-driver runs the test kit's DRA driver (package dratest)
// until SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/agenttest/dratest"
)

func main() {
	var cfg dratest.Config
	var kubeconfig, registry, pluginDir string
	flag.StringVar(&cfg.Name, "name", "dra.nodekit.test", "driver name")
	flag.StringVar(&cfg.NodeName, "node-name", "", "node whose ResourceSlice the driver publishes (required)")
	flag.IntVar(&cfg.Devices, "devices", 1, "number of devices in the slice")
	flag.StringVar(&cfg.CDIDir, "cdi-dir", "", "directory of CDI spec files the runtime reads (required)")
	flag.StringVar(&cfg.StateDir, "state-dir", "", "directory of calls.log (required)")
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the driver's API access (required)")
	flag.StringVar(&registry, "registry-dir", "", "the agent's plugins_registry dir (required)")
	flag.StringVar(&pluginDir, "plugin-dir", "", "directory of the driver's dra.sock (required)")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(cfg, kubeconfig, registry, pluginDir); err != nil {
		fmt.Fprintln(os.Stderr, "dratest-driver:", err)
		os.Exit(1)
	}
}

func run(cfg dratest.Config, kubeconfig, registry, pluginDir string) error {
	if kubeconfig == "" || registry == "" || pluginDir == "" {
		return fmt.Errorf("-kubeconfig, -registry-dir and -plugin-dir are required")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	//nolint:forbidigo // a main makes the root context
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	return dratest.Serve(ctx, cfg, client, registry, pluginDir)
}
