package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// DefaultPort is the kubelet API's port (KubeletConfiguration port).
	DefaultPort = 10250
	// ReadOnlyPortUpstream is the port upstream used for the read-only API
	// (readOnlyPort); it is served only when Config.ReadOnlyPort is set.
	ReadOnlyPortUpstream = 10255

	// Server timeouts, as upstream: streams (follow, exec) may last hours.
	readWriteTimeout = 4 * time.Hour
	idleTimeout      = 90 * time.Second
	maxHeaderBytes   = 1 << 20
	shutdownTimeout  = 5 * time.Second
)

// Config configures New. NodeName and Authorizer are required; every other
// dependency is optional and its endpoints answer 503 (or 404, 501) when
// it is missing.
type Config struct {
	// NodeName is the node whose API this is: authorization asks about
	// nodes/NodeName.
	NodeName string
	// Address to listen on ("" means every address) and Port (0 means
	// DefaultPort); used by Run.
	Address string
	Port    int
	// ReadOnlyPort, when set, also serves /healthz, /pods, /stats and the
	// metrics over plain HTTP without authentication (upstream's
	// readOnlyPort, usually 10255). 0, the default, serves none.
	ReadOnlyPort int

	// DisableSecurePort makes Run serve no secure port (upstream's
	// enableServer: false); the read-only port, when set, is still served.
	DisableSecurePort bool
	// DisableDebuggingHandlers turns off the endpoints upstream gates with
	// enableDebuggingHandlers (on by default): /run, /exec, /attach,
	// /portForward, /containerLogs, /runningpods, /debug/pprof and /logs
	// answer 405 "Debug endpoints are disabled.", and /configz,
	// /checkpoint and /debug/flags/v are not served (404), as upstream.
	DisableDebuggingHandlers bool
	// DisableProfilingHandler makes /debug/pprof/ answer 405 "profiling
	// endpoint is disabled." (upstream's enableProfilingHandler: false).
	// Otherwise, with the debugging handlers, it serves net/http/pprof's
	// index, cmdline, profile, symbol, trace and named profiles (GET).
	DisableProfilingHandler bool
	// SetVerbosity serves PUT /debug/flags/v with the debugging handlers
	// (upstream's enableDebugFlagsHandler): it is given the body, the new
	// log verbosity, and returns the reply ("successfully set
	// klog.logging.verbosity to N") or an error, answered 400. Nil answers
	// 405 "flags endpoint is disabled.".
	SetVerbosity func(level string) (string, error)
	// SystemLogDir is served read-only under /logs/ with the debugging
	// handlers (upstream's enableSystemLogHandler, /var/log). "" answers
	// 405 "logs endpoint is disabled.", as upstream with it off.
	SystemLogDir string

	// Certificate is the serving certificate (see LoadCertificateFiles,
	// NewSelfSignedCertificate, NewCSRCertificate). Nil means a
	// self-signed certificate for NodeName, made by New.
	Certificate CertificateSource
	// TLSMinVersion defaults to TLS 1.2; CipherSuites to Go's defaults
	// (they apply up to TLS 1.2: Go does not let TLS 1.3's be chosen);
	// CurvePreferences to Go's key exchanges. ParseTLSVersion,
	// ParseCipherSuites and ParseCurvePreferences read
	// KubeletConfiguration's tlsMinVersion, tlsCipherSuites and
	// tlsCurvePreferences.
	TLSMinVersion    uint16
	CipherSuites     []uint16
	CurvePreferences []tls.CurveID

	// StreamingIdleTimeout closes an exec, attach or port-forward stream
	// after no byte has passed either way for this long
	// (streamingConnectionIdleTimeout). 0 means no idle limit; the
	// server's 4-hour limit on every connection still applies.
	StreamingIdleTimeout time.Duration
	// TranslateWebSockets serves exec and attach callers of the WebSocket
	// v5 protocol (v5.channel.k8s.io, with stream close) by translating to
	// SPDY towards the runtime's streaming server, and port-forward
	// callers of the WebSocket tunneling protocol by unwrapping their SPDY,
	// as upstream's ExtendWebSocketsToKubelet. An agent that declares that
	// node feature must set it: the API server then sends such callers
	// (kubectl ≥ 1.30) to the node as they are, and the runtimes' streaming
	// servers refuse them (403).
	TranslateWebSockets bool

	// Authenticator identifies callers (UnionAuthenticator of
	// NewX509Authenticator and NewTokenReviewAuthenticator, as upstream).
	// Nil identifies nobody.
	Authenticator Authenticator
	// AllowAnonymous lets unidentified callers in as system:anonymous
	// (still subject to the Authorizer). Off by default: they get 401.
	AllowAnonymous bool
	// Authorizer decides every request (NewSubjectAccessReviewAuthorizer,
	// or AlwaysAllow{} to knowingly disable authorization). Required.
	Authorizer Authorizer

	// Pods are the agent's pods (/pods, and the pod of logs/exec/attach/
	// port-forward requests).
	Pods PodLister
	// Runtime is the container runtime's view (/runningpods/, the running
	// containers of exec/attach/port-forward, and the default Logs).
	Runtime RuntimePods
	// Streaming serves exec, attach and port-forward (criruntime.Runtime).
	Streaming Streamer
	// Logs finds container log files. Nil means NewRuntimeLogs(Runtime).
	Logs LogLocator
	// Stats serves /stats/summary and /metrics/resource.
	Stats StatsProvider
	// Metrics is served on /metrics (a registry the agent's metrics, see
	// RegisterAgentMetrics, are registered in); ProbeMetrics on
	// /metrics/probes (see RegisterProbeMetrics).
	Metrics      prometheus.Gatherer
	ProbeMetrics prometheus.Gatherer
	// ContainerMetrics serves /metrics/cadvisor (containermetrics.Collector);
	// nil serves an empty page.
	ContainerMetrics ContainerMetrics
	// MetricsRegisterer, if set, receives the server's own request
	// metrics (kubelet_http_requests_total, ...).
	MetricsRegisterer prometheus.Registerer
	// HealthChecks are added to /healthz after the built-in "ping".
	HealthChecks []HealthCheck
	// Configz is served as JSON on /configz under the key "kubeletconfig",
	// as upstream (e.g. the KubeletConfiguration in use). Nil serves {}.
	Configz any
	// Statusz, when set, serves /statusz with the debugging handlers
	// (upstream's ComponentStatusz, on by default in v1.37); Flagz, when
	// set, serves /flagz (ComponentFlagz, likewise): the command-line
	// flags and their values, secrets redacted by the caller.
	Statusz *Statusz
	Flagz   func() map[string]string
	// Checkpointer enables /checkpoint (forensic container checkpoints);
	// nil, the default, answers 404. CheckpointDir is where the runtime
	// writes the archives (required with Checkpointer).
	Checkpointer  Checkpointer
	CheckpointDir string

	// Clock is used for log timestamps (sinceSeconds), follow re-checks
	// and certificate checks. Default the real clock.
	Clock clock.Clock
	// TracerProvider, when set, traces every request to either port with a
	// server span named by its route, as upstream's OpenTelemetry filter
	// on kubelet's server (tracing.go); the read-only port's spans start
	// new traces (a public endpoint). nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Server is the kubelet HTTP API of one node. Its handlers are safe for
// concurrent use.
type Server struct {
	cfg      Config
	clock    clock.Clock
	logs     LogLocator
	health   healthzHandler
	metrics  *httpMetrics
	tls      *tls.Config
	secure   http.Handler
	readOnly http.Handler
}

// New builds the server: its routes, TLS settings and (without a
// Certificate) a self-signed certificate. It does not listen: call Run, or
// Serve with a listener.
func New(cfg Config) (*Server, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("server: Config.NodeName is empty")
	}
	if cfg.Authorizer == nil {
		return nil, errors.New("server: Config.Authorizer is nil (use server.AlwaysAllow{} to disable authorization on purpose)")
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("server: Config.Port %d is not a port", cfg.Port)
	}
	if cfg.ReadOnlyPort < 0 || cfg.ReadOnlyPort > 65535 {
		return nil, fmt.Errorf("server: Config.ReadOnlyPort %d is not a port", cfg.ReadOnlyPort)
	}
	if cfg.StreamingIdleTimeout < 0 {
		return nil, fmt.Errorf("server: Config.StreamingIdleTimeout %v is negative", cfg.StreamingIdleTimeout)
	}
	if err := checkTLSSettings(cfg.TLSMinVersion, cfg.CipherSuites, cfg.CurvePreferences); err != nil {
		return nil, err
	}
	if cfg.Checkpointer != nil && cfg.CheckpointDir == "" {
		return nil, errors.New("server: Config.CheckpointDir is empty while Checkpointer is set")
	}
	for i, c := range cfg.HealthChecks {
		if c.Name == "" || c.Check == nil {
			return nil, fmt.Errorf("server: Config.HealthChecks[%d] needs a Name and a Check", i)
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	var err error
	s := &Server{cfg: cfg, clock: cfg.Clock, logs: cfg.Logs, health: healthzHandler{checks: append([]HealthCheck{pingCheck}, cfg.HealthChecks...)}}
	if s.logs == nil && cfg.Runtime != nil {
		s.logs = NewRuntimeLogs(cfg.Runtime)
	}
	if s.health.slis, err = newSLIMetrics(); err != nil {
		return nil, err
	}
	if cfg.MetricsRegisterer != nil {
		m, err := registerHTTPMetrics(cfg.MetricsRegisterer)
		if err != nil {
			return nil, err
		}
		s.metrics = m
	}
	certs := cfg.Certificate
	if certs == nil {
		self, err := NewSelfSignedCertificate(cfg.NodeName, nil, nil, cfg.Clock)
		if err != nil {
			return nil, err
		}
		certs = self
	}
	s.tls = &tls.Config{
		MinVersion:       cfg.TLSMinVersion,
		CipherSuites:     cfg.CipherSuites,
		CurvePreferences: cfg.CurvePreferences,
		GetCertificate:   certs.GetCertificate,
		// Client certificates are verified by the x509 authenticator, so
		// that a caller without one can still present a token.
		ClientAuth: tls.RequestClientCert,
	}
	if s.tls.MinVersion == 0 {
		s.tls.MinVersion = tls.VersionTLS12
	}
	s.secure = s.metrics.instrument(s.clock, "readwrite", s.traced(false, s.withAuth(s.routeNamed(s.routes(false)))))
	s.readOnly = s.metrics.instrument(s.clock, "readonly", s.traced(true, s.routeNamed(s.routes(true))))
	return s, nil
}

// routes builds the mux: every endpoint, or for the read-only port (and
// with DisableDebuggingHandlers) only those upstream installs without the
// debugging handlers: healthz, pods, stats and metrics, with the
// debugging paths answering 405 and the rest (configz, checkpoint) 404.
func (s *Server) routes(readOnly bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/healthz", s.health)
	mux.Handle("/healthz/", s.health)
	mux.HandleFunc("GET /pods", s.pods)
	mux.HandleFunc("GET /stats/summary", s.statsSummary)
	mux.HandleFunc("POST /stats/summary", s.statsSummary)
	mux.Handle("GET /metrics", s.gatherer(s.cfg.Metrics))
	mux.Handle("GET /metrics/probes", s.gatherer(s.cfg.ProbeMetrics))
	mux.HandleFunc("GET /metrics/resource", s.resourceMetrics)
	mux.HandleFunc("GET /metrics/cadvisor", s.containerMetrics)
	mux.Handle("GET /metrics/slis", s.health.slis)
	mux.Handle("DELETE /metrics/slis", s.health.slis)
	if readOnly || s.cfg.DisableDebuggingHandlers {
		disabled := func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "Debug endpoints are disabled.", http.StatusMethodNotAllowed)
		}
		// The paths upstream serves only with debugging handlers on.
		for _, p := range []string{"/run/", "/exec/", "/attach/", "/portForward/", "/containerLogs/", "/runningpods/", "/debug/pprof/", "/logs/"} {
			mux.HandleFunc(p, disabled)
		}
		return mux
	}
	mux.HandleFunc("GET /runningpods/{$}", s.runningPods)
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.containerLogs)
	for _, m := range []string{"GET", "POST"} {
		mux.HandleFunc(m+" /exec/{namespace}/{pod}/{container}", s.exec)
		mux.HandleFunc(m+" /exec/{namespace}/{pod}/{uid}/{container}", s.exec)
		mux.HandleFunc(m+" /attach/{namespace}/{pod}/{container}", s.attach)
		mux.HandleFunc(m+" /attach/{namespace}/{pod}/{uid}/{container}", s.attach)
		mux.HandleFunc(m+" /portForward/{namespace}/{pod}", s.portForward)
		mux.HandleFunc(m+" /portForward/{namespace}/{pod}/{uid}", s.portForward)
	}
	mux.HandleFunc("GET /configz", s.configz)
	if s.cfg.Statusz != nil {
		mux.HandleFunc("GET /statusz", s.statusz)
	}
	if s.cfg.Flagz != nil {
		mux.HandleFunc("GET /flagz", s.flagz)
	}
	s.debugRoutes(mux)
	if s.cfg.SystemLogDir != "" {
		mux.Handle("GET /logs/", http.StripPrefix("/logs/", http.FileServer(http.Dir(s.cfg.SystemLogDir))))
	} else {
		mux.HandleFunc("/logs/", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "logs endpoint is disabled.", http.StatusMethodNotAllowed)
		})
	}
	if s.cfg.Checkpointer != nil {
		mux.HandleFunc("POST /checkpoint/{namespace}/{pod}/{container}", s.checkpoint)
	}
	return mux
}

// gatherer serves a registry, or an empty page without one.
func (s *Server) gatherer(g prometheus.Gatherer) http.Handler {
	if g == nil {
		g = prometheus.NewRegistry()
	}
	return gathererHandler(g)
}

// configz serves GET /configz: {"kubeletconfig": Config.Configz}.
func (s *Server) configz(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Configz == nil {
		writeJSON(w, r, map[string]any{})
		return
	}
	writeJSON(w, r, map[string]any{"kubeletconfig": s.cfg.Configz})
}

// Handler is the secure API (authentication and authorization included),
// for embedding in a server of one's own; it expects TLS (r.TLS) for
// client certificates.
func (s *Server) Handler() http.Handler { return s.secure }

// ReadOnlyHandler is the unauthenticated read-only API.
func (s *Server) ReadOnlyHandler() http.Handler { return s.readOnly }

// TLSConfig is the secure port's TLS configuration (the caller must not
// modify it).
func (s *Server) TLSConfig() *tls.Config { return s.tls }

func (s *Server) httpServer(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{
		Handler:        h,
		ReadTimeout:    readWriteTimeout,
		WriteTimeout:   readWriteTimeout,
		IdleTimeout:    idleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		BaseContext:    func(net.Listener) context.Context { return ctx },
	}
}

// serve runs hs on l until ctx ends, then shuts it down.
func serve(ctx context.Context, hs *http.Server, l net.Listener, tlsOn bool) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			_ = hs.Close()
		}
	}()
	var err error
	if tlsOn {
		err = hs.ServeTLS(l, "", "")
	} else {
		err = hs.Serve(l)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	// ServeTLS can fail before it serves (and so before it owns l):
	// close l, so that no caller waits on a listener nobody accepts on.
	_ = l.Close()
	return err
}

// Serve serves the secure API with TLS on l until ctx ends (then it shuts
// down, giving requests a few seconds; streams and follows are cut). It
// returns nil after ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	hs := s.httpServer(ctx, s.secure)
	hs.TLSConfig = s.tls.Clone()
	klog.FromContext(ctx).Info("Serving the node API", "address", l.Addr().String())
	return serve(ctx, hs, l, true)
}

// ServeReadOnly serves the read-only API over plain HTTP on l until ctx
// ends.
func (s *Server) ServeReadOnly(ctx context.Context, l net.Listener) error {
	klog.FromContext(ctx).Info("Serving the read-only node API", "address", l.Addr().String())
	return serve(ctx, s.httpServer(ctx, s.readOnly), l, false)
}

// Run listens on Address:Port (unless DisableSecurePort) and
// Address:ReadOnlyPort (when set) and serves until ctx ends or serving
// fails. It returns nil after ctx ends, at once if there is nothing to
// serve.
func (s *Server) Run(ctx context.Context) error {
	type port struct {
		name  string
		port  int
		serve func(context.Context, net.Listener) error
	}
	var ports []port
	if !s.cfg.DisableSecurePort {
		ports = append(ports, port{"listen", s.cfg.Port, s.Serve})
	} else {
		klog.FromContext(ctx).Info("The node API's secure port is disabled (enableServer: false)")
	}
	if s.cfg.ReadOnlyPort > 0 {
		ports = append(ports, port{"listen read-only", s.cfg.ReadOnlyPort, s.ServeReadOnly})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lc net.ListenConfig
	errc := make(chan error, len(ports))
	started := 0
	var first error
	for _, p := range ports {
		l, err := lc.Listen(ctx, "tcp", net.JoinHostPort(s.cfg.Address, strconv.Itoa(p.port)))
		if err != nil {
			first = fmt.Errorf("%s: %w", p.name, err)
			cancel()
			break
		}
		started++
		go func() { errc <- p.serve(ctx, l) }()
	}
	for range started {
		if err := <-errc; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	if first != nil {
		return fmt.Errorf("server: %w", first)
	}
	return nil
}

// checkpointLocation names the archive of one checkpoint, as upstream:
// checkpoint-NAMESPACE_POD-CONTAINER-TIME.tar in CheckpointDir.
func (s *Server) checkpointLocation(namespace, pod, container string) string {
	return filepath.Join(s.cfg.CheckpointDir, fmt.Sprintf("checkpoint-%s_%s-%s-%s.tar", pod, namespace, container, s.clock.Now().Format(time.RFC3339)))
}
