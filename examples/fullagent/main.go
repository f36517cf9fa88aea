// Command fullagent is nodekit's reference kubelet: it wires every nodekit
// package into a node agent that joins a Kubernetes v1.37 cluster and runs
// pods on any CRI runtime. It takes kubelet v1.37's command line (its flag
// names and semantics, configuration flags overriding the files), a
// kubeconfig, an upstream KubeletConfiguration file and --config-dir
// drop-ins, so it can be swapped in for kubelet; what nodekit does not
// implement is refused at start-up by name (fields.go, flags.go). Without
// --kubeconfig it runs static pods only, and refuses webhook authentication
// and authorization as kubelet does (set AlwaysAllow and no webhook).
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
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// kubeletVersion is the kubelet release whose behaviour fullagent matches.
const kubeletVersion = "v1.37.2"

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if isHelp(err) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fullagent:", err)
		os.Exit(2)
	}
	if o.version {
		fmt.Println("nodekit fullagent (kubelet " + kubeletVersion + ")")
		return
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
	cfg, gates, err := loadConfig(klog.NewContext(ctx, klog.Background()), o)
	if err != nil {
		klog.Background().Error(err, "fullagent: configuration refused")
		klog.Flush()
		os.Exit(1)
	}
	logger, err := setupLogging(cfg.Logging, o.logJSON)
	if err != nil {
		klog.Background().Error(err, "fullagent: logging")
		os.Exit(1)
	}
	ctx = klog.NewContext(ctx, logger)
	if contentionProfiling(cfg) {
		// Process-global, so here rather than in a library: blocking
		// events for /debug/pprof/block, as upstream.
		runtime.SetBlockProfileRate(1)
	}
	setOpenFiles(logger, cfg.MaxOpenFiles)
	if err := runWith(ctx, o, cfg, gates); err != nil {
		logger.Error(err, "fullagent failed")
		klog.Flush()
		os.Exit(1)
	}
	logger.Info("fullagent stopped; containers keep running")
}

// setupLogging applies logging.verbosity, logging.vmodule and
// logging.flushFrequency (or -v, --vmodule, --log-flush-frequency) to
// klog, the process's logger, and returns klog's text logger or, with
// --log-json, JSON lines on stderr at klog's verbosity.
func setupLogging(c logsapi.LoggingConfiguration, jsonLines bool) (logr.Logger, error) {
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	if err := kfs.Set("v", strconv.Itoa(int(c.Verbosity))); err != nil {
		return logr.Logger{}, fmt.Errorf("logging.verbosity: %w", err)
	}
	if vm := logsapi.VModuleConfigurationPflag(&c.VModule).String(); vm != "" {
		if err := kfs.Set("vmodule", vm); err != nil {
			return logr.Logger{}, fmt.Errorf("logging.vmodule: %w", err)
		}
	}
	if d := c.FlushFrequency.Duration.Duration; d > 0 {
		klog.StartFlushDaemon(d)
	}
	return newLogger(jsonLines), nil
}

// setOpenFiles raises the open-files limit to maxOpenFiles, as kubelet:
// a failure (no CAP_SYS_RESOURCE) is logged, not fatal.
func setOpenFiles(logger logr.Logger, n int64) {
	if n <= 0 {
		return
	}
	lim := syscall.Rlimit{Cur: uint64(n), Max: uint64(n)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		logger.Error(err, "Failed to set the open-files limit (maxOpenFiles)", "maxOpenFiles", n)
	}
}

// run loads the configuration of o and runs the agent until ctx is done.
func run(ctx context.Context, o *options) error {
	cfg, gates, err := loadConfig(ctx, o)
	if err != nil {
		return err
	}
	return runWith(ctx, o, cfg, gates)
}

// runWith builds the agent from the options and the loaded configuration
// and runs it until ctx is done.
func runWith(ctx context.Context, o *options, cfg *kubeletv1beta1.KubeletConfiguration, gates featuregate.FeatureGate) error {
	a, err := newAgent(ctx, o, cfg, gates)
	if err != nil {
		return err
	}
	return a.run(ctx)
}
