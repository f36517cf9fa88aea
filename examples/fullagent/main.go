// Command fullagent is nodekit's reference kubelet: it wires every nodekit
// package into a node agent that joins a Kubernetes v1.37 cluster and runs
// pods on any CRI runtime. It takes a kubeconfig, an upstream
// KubeletConfiguration file and the common kubelet flags, so it can be
// swapped in for kubelet. Without --kubeconfig it runs static pods only.
//
// SIGINT and SIGTERM stop the agent and leave every container running: a
// restarted agent adopts them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

func main() {
	fs := flag.NewFlagSet("fullagent", flag.ContinueOnError)
	o := &options{}
	o.bind(fs)
	klog.InitFlags(fs) // -v, --logging-format is not klog's; see --log-json
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// NODEKIT_CPUPROFILE=FILE writes a CPU profile of the whole run, for
	// the benchmark's "what dominates" (go tool pprof FILE).
	if path := os.Getenv("NODEKIT_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
		}
	}
	logger := newLogger(o.logJSON)
	ctx = klog.NewContext(ctx, logger)
	if err := run(ctx, o); err != nil {
		logger.Error(err, "fullagent failed")
		klog.Flush()
		os.Exit(1)
	}
	logger.Info("fullagent stopped; containers keep running")
}

// options are the command-line flags, named as kubelet's.
type options struct {
	kubeconfig         string
	config             string
	hostnameOverride   string
	nodeIP             string
	rootDir            string
	runtimeEndpoint    string
	podManifestPath    string
	nodeLabels         mapFlag
	registerWithTaints taintsFlag
	logJSON            bool
	podCheckpoint      bool
	// TLS bootstrap of the node's client certificate.
	bootstrapKubeconfig string
	certDir             string
	// Container GC, as kubelet's (deprecated) flags; the period, fixed at
	// one minute upstream, is a flag here.
	minContainerTTL     time.Duration
	containerGCPeriod   time.Duration
	maxDeadPerContainer int
	maxDeadContainers   int
}

func (o *options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the node's identity; empty runs standalone (static pods only)")
	fs.StringVar(&o.config, "config", "", "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1)")
	fs.StringVar(&o.hostnameOverride, "hostname-override", "", "node name to use instead of the hostname")
	fs.StringVar(&o.nodeIP, "node-ip", "", "the node's IP address")
	fs.StringVar(&o.rootDir, "root-dir", "/var/lib/kubelet", "directory for pod directories and checkpoints")
	fs.StringVar(&o.runtimeEndpoint, "container-runtime-endpoint", "", "CRI endpoint (overrides the config file)")
	fs.StringVar(&o.podManifestPath, "pod-manifest-path", "", "static pod manifest directory (overrides staticPodPath)")
	fs.Var(&o.nodeLabels, "node-labels", "labels to add when registering the node: key=value,...")
	fs.Var(&o.registerWithTaints, "register-with-taints", "taints to register the node with: key=value:Effect,...")
	fs.DurationVar(&o.minContainerTTL, "minimum-container-ttl-duration", 0, "minimum age of a dead container before garbage collection")
	fs.DurationVar(&o.containerGCPeriod, "container-gc-period", time.Minute, "how often dead containers are garbage collected")
	fs.IntVar(&o.maxDeadPerContainer, "maximum-dead-containers-per-container", 1, "dead instances of one container to keep; negative keeps all")
	fs.IntVar(&o.maxDeadContainers, "maximum-dead-containers", -1, "dead containers to keep on the node; negative keeps all")
	fs.StringVar(&o.bootstrapKubeconfig, "bootstrap-kubeconfig", "", "kubeconfig with bootstrap credentials (a bootstrap token), used to request the node's client certificate "+
		"(CSR, signer kubernetes.io/kube-apiserver-client-kubelet) when --kubeconfig has no valid one; --kubeconfig is then written")
	fs.StringVar(&o.certDir, "cert-dir", "", "directory of the node's client certificates (default ROOT-DIR/pki)")
	fs.BoolVar(&o.logJSON, "log-json", false, "write logs as JSON lines")
	fs.BoolVar(&o.podCheckpoint, "pod-checkpoint", false, "keep a checkpoint of this node's pods, the ConfigMaps, Secrets and Services they use and the Node in ROOT-DIR/pod_checkpoint "+
		"(mode 0600: it holds Secrets in clear), and run the pods from it when the agent starts and the API server does not answer within 10s; "+
		"when it answers, pods deleted meanwhile are stopped. A corrupt checkpoint is reported and ignored")
}

// mapFlag is key=value,key=value.
type mapFlag map[string]string

func (m *mapFlag) String() string { return fmt.Sprint(map[string]string(*m)) }

func (m *mapFlag) Set(s string) error {
	if *m == nil {
		*m = map[string]string{}
	}
	for _, kv := range strings.Split(s, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q is not key=value", kv)
		}
		(*m)[k] = v
	}
	return nil
}

// taintsFlag is key=value:Effect,...
type taintsFlag []v1.Taint

func (t *taintsFlag) String() string { return fmt.Sprint([]v1.Taint(*t)) }

func (t *taintsFlag) Set(s string) error {
	for _, spec := range strings.Split(s, ",") {
		if spec == "" {
			continue
		}
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok {
			return fmt.Errorf("taint %q has no :Effect", spec)
		}
		k, v, _ := strings.Cut(kv, "=")
		taint := v1.Taint{Key: k, Value: v, Effect: v1.TaintEffect(effect)}
		if err := validTaint(taint); err != nil {
			return err
		}
		*t = append(*t, taint)
	}
	return nil
}
