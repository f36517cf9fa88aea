package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/server"
)

// Upstream's v1beta1 defaults of the serving fields, applied here when a
// field is unset so that this mapping means the same with or without a
// loader that defaults them.
const (
	defaultStreamingIdleTimeout = 4 * time.Hour
	systemLogDir                = "/var/log"
)

// servingConfig maps the KubeletConfiguration's serving fields onto sc:
// address, port, readOnlyPort, enableServer, enableDebuggingHandlers,
// enableProfilingHandler, enableDebugFlagsHandler, enableSystemLogHandler, enableSystemLogQuery, tlsMinVersion, tlsCipherSuites, tlsCurvePreferences and
// streamingConnectionIdleTimeout. A value that cannot be honoured is an
// error naming the field.
func servingConfig(ctx context.Context, cfg *kubeletv1beta1.KubeletConfiguration, sc *server.Config) error {
	logger := klog.FromContext(ctx)
	sc.Address, sc.Port, sc.ReadOnlyPort = cfg.Address, int(cfg.Port), int(cfg.ReadOnlyPort)
	if cfg.Address != "" && net.ParseIP(cfg.Address) == nil {
		return fmt.Errorf("address: %q is not an IP address", cfg.Address)
	}
	if cfg.ReadOnlyPort < 0 || cfg.ReadOnlyPort > 65535 {
		return fmt.Errorf("readOnlyPort: %d must be between 0 and 65535", cfg.ReadOnlyPort)
	}
	sc.DisableSecurePort = cfg.EnableServer != nil && !*cfg.EnableServer
	sc.DisableDebuggingHandlers = cfg.EnableDebuggingHandlers != nil && !*cfg.EnableDebuggingHandlers
	// /debug/pprof/ and /debug/flags/v (both on by default, and only with
	// the debugging handlers, as upstream); the verbosity PUT sets klog's
	// -v and the logging format's own, as upstream's (logs.GlogSetter).
	sc.DisableProfilingHandler = cfg.EnableProfilingHandler != nil && !*cfg.EnableProfilingHandler
	if cfg.EnableDebugFlagsHandler == nil || *cfg.EnableDebugFlagsHandler {
		sc.SetVerbosity = logs.GlogSetter
	}
	// /logs/ serves /var/log, as upstream's default (with the debugging
	// handlers); the node log query (?query=) is not built.
	if cfg.EnableSystemLogHandler == nil || *cfg.EnableSystemLogHandler {
		sc.SystemLogDir = systemLogDir
	}
	if cfg.EnableSystemLogQuery != nil && *cfg.EnableSystemLogQuery {
		return fmt.Errorf("enableSystemLogQuery: true is not supported: nodekit serves /logs/ as files only, without the node log query")
	}

	var err error
	if sc.TLSMinVersion, err = server.ParseTLSVersion(cfg.TLSMinVersion); err != nil {
		return fmt.Errorf("tlsMinVersion: %w", err)
	}
	if sc.CipherSuites, err = server.ParseCipherSuites(cfg.TLSCipherSuites); err != nil {
		return fmt.Errorf("tlsCipherSuites%w", err)
	}
	if insecure := server.InsecureCipherSuites(sc.CipherSuites); len(insecure) > 0 {
		logger.Info("tlsCipherSuites: insecure cipher suites in use", "ciphers", insecure)
	}
	if sc.TLSMinVersion == tls.VersionTLS13 && len(sc.CipherSuites) > 0 {
		logger.Info("tlsCipherSuites: TLS 1.3 cipher suites are not configurable; the list applies to no connection with tlsMinVersion VersionTLS13")
	}
	if sc.CurvePreferences, err = server.ParseCurvePreferences(cfg.TLSCurvePreferences); err != nil {
		return fmt.Errorf("tlsCurvePreferences%w", err)
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSPrivateKeyFile == "") {
		return fmt.Errorf("tlsCertFile and tlsPrivateKeyFile: set both or neither (tlsCertFile %q, tlsPrivateKeyFile %q)", cfg.TLSCertFile, cfg.TLSPrivateKeyFile)
	}

	// Upstream v1.37 documents streamingConnectionIdleTimeout as
	// deprecated and no longer acting (the runtime's streaming server has
	// its own idle limit); nodekit applies it to the exec, attach and
	// port-forward streams it relays, with upstream's default of 4h.
	switch idle := cfg.StreamingConnectionIdleTimeout.Duration; {
	case idle < 0:
		return fmt.Errorf("streamingConnectionIdleTimeout: %v must not be negative", idle)
	case idle == 0:
		sc.StreamingIdleTimeout = defaultStreamingIdleTimeout
	default:
		sc.StreamingIdleTimeout = idle
	}
	return nil
}

// healthzServer is the local health endpoint of healthzBindAddress and
// healthzPort (default 127.0.0.1:10248), or nil when healthzPort is 0. As
// upstream it runs whether or not enableServer is set, and checks only
// that the agent answers ("ping"); the sync loop's and the PLEG's health
// are on the node API's /healthz.
func healthzServer(cfg *kubeletv1beta1.KubeletConfiguration) (*server.HealthzServer, error) {
	port := int32(server.DefaultHealthzPort)
	if cfg.HealthzPort != nil {
		port = *cfg.HealthzPort
	}
	if port == 0 {
		return nil, nil
	}
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("healthzPort: %d must be between 1 and 65535, or 0 to disable", port)
	}
	addr := cfg.HealthzBindAddress
	if addr == "" {
		addr = server.DefaultHealthzAddress
	}
	if net.ParseIP(addr) == nil {
		return nil, fmt.Errorf("healthzBindAddress: %q is not an IP address", addr)
	}
	return &server.HealthzServer{Address: addr, Port: int(port)}, nil
}

// contentionProfiling reports whether enableContentionProfiling applies:
// upstream turns on block profiling (runtime.SetBlockProfileRate(1)) when
// it installs the profiling handler, that is with enableServer,
// enableDebuggingHandlers and enableProfilingHandler (all on by default).
func contentionProfiling(cfg *kubeletv1beta1.KubeletConfiguration) bool {
	on := func(b *bool) bool { return b == nil || *b }
	return cfg.EnableContentionProfiling && on(cfg.EnableServer) && on(cfg.EnableDebuggingHandlers) && on(cfg.EnableProfilingHandler)
}
