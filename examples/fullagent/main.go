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
//
// Build it with upstream's release tags, and static:
//
//	CGO_ENABLED=0 go build -trimpath -tags selinux,notest,grpcnotrace ./examples/fullagent
//
// Without grpcnotrace, gRPC links golang.org/x/net/trace, whose
// html/template page makes the linker keep every exported method of every
// reachable type: the binary is 40% larger, and on a kernel that maps the
// page cache's large folios whole, so is most of its resident memory.
//
// Upstream builds kubelet with cgo; fullagent's only cgo is the standard
// library's (net's resolver, os/user), so it is built without: no libc,
// libm or NSS modules mapped and no pthread stack per OS thread, about
// 3 MiB less resident. What that changes, and how the agent keeps
// kubelet's behaviour: host names resolve with Go's resolver, as a cgo
// build also does unless nsswitch.conf or resolv.conf asks for what Go
// cannot do (such as an NSS hosts module), and the user-namespace check
// for a "kubelet" user asks `getent passwd` (criruntime/userns), which
// goes through NSS as cgo's os/user would.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // logging.format: json, as kubelet
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/internal/grpcbuf"
)

// kubeletVersion is the kubelet release whose behaviour fullagent matches.
const kubeletVersion = "v1.37.2"

func main() {
	// As kubelet: no OpenTelemetry metrics are used, and the default
	// global meter provider would keep every instrument the gRPC
	// instrumentation of traced CRI connections makes.
	otel.SetMeterProvider(noop.NewMeterProvider())
	// Received CRI lists in buffers near their size, not gRPC's 1 MiB
	// tier (internal/grpcbuf); before any gRPC connection is made.
	if err := grpcbuf.Register(); err != nil {
		fmt.Fprintln(os.Stderr, "fullagent:", err)
		os.Exit(1)
	}
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
	logger, err := setupLogging(&cfg.Logging, gates)
	if err != nil {
		klog.Background().Error(err, "fullagent: logging")
		klog.Flush()
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
	klog.Flush()
}

// setupLogging applies the logging block (format, flushFrequency,
// verbosity, vmodule, options; their flags already merged in) to the
// process's klog through component-base's logs, as kubelet does: the
// format's logger (text, or json: upstream's JSON schema) becomes klog's,
// so the agent and every library logging through klog (client-go) write
// the same lines. It changes global state and may be applied once per
// process: only main calls it; agents run in-process by tests log
// through the test's klog.
func setupLogging(c *logsapi.LoggingConfiguration, gates featuregate.FeatureGate) (logr.Logger, error) {
	logs.InitLogs()
	if err := logsapi.ValidateAndApplyAsField(c, gates, field.NewPath("logging")); err != nil {
		return logr.Logger{}, fmt.Errorf("initialize logging: %w", err)
	}
	return klog.Background(), nil
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
	defer a.stopTracing(ctx) // the spans of the last steps are sent
	return a.run(ctx)
}
