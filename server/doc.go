// Package server owns the kubelet HTTP API: the HTTPS endpoint on :10250
// that the API server calls for `kubectl logs`, `exec`, `attach`,
// `port-forward` and `get --raw /api/v1/nodes/NAME/proxy/...`, and that
// monitoring scrapes for metrics and stats. It serves /healthz, /pods,
// /runningpods/, /containerLogs, /exec, /attach, /portForward, /metrics,
// /metrics/probes, /metrics/resource, /metrics/cadvisor
// (Config.ContainerMetrics), /metrics/slis (the /healthz SLIs),
// /stats/summary, /configz, /statusz and /flagz (Config.Statusz,
// Config.Flagz), /debug/pprof/, /debug/flags/v (Config.SetVerbosity) and
// (when enabled) /checkpoint, with upstream kubelet's paths, parameters
// and status codes.
//
// Every request on the secure port is authenticated (x509 client
// certificates against a CA bundle, bearer tokens through TokenReview;
// anonymous only when allowed) and authorized with upstream's mapping of
// paths to nodes/* subresources (SubjectAccessReview, cached). An
// unauthenticated request gets 401 and an unauthorized one 403 before any
// handler runs. The serving certificate comes from files, is self-signed
// at start, or is requested from the API server through a
// kubernetes.io/kubelet-serving CSR and rotated before it expires
// (CSRCertificate). TLS versions, cipher suites and key exchanges take
// upstream's configuration names (ParseTLSVersion, ParseCipherSuites,
// ParseCurvePreferences). As upstream's switches: DisableDebuggingHandlers
// turns exec, attach, port-forward, logs and the other debugging paths
// into 405s, DisableSecurePort leaves only the read-only port, and
// StreamingIdleTimeout closes quiet streams. HealthzServer is the local
// plain-HTTP health endpoint (127.0.0.1:10248) tools such as kubeadm poll.
//
// The package does not run containers, collect statistics or own any pod
// state: it reads what other parts own through small interfaces —
// PodLister (the agent's pods), RuntimePods (the runtime's view),
// Streamer (CRI Exec/Attach/PortForward URLs, proxied with the caller's
// SPDY or WebSocket upgrade; with TranslateWebSockets, kubectl's WebSocket
// v5 exec/attach and WebSocket-tunneled port-forward are translated to
// SPDY for the runtime, as upstream's ExtendWebSocketsToKubelet),
// LogLocator (CRI log files), StatsProvider (the Summary API) — and
// answers 503 or 404 for what was not supplied.
// Metric names for the rest of the agent are defined here
// (RegisterAgentMetrics, RegisterProbeMetrics, RegisterBuildInfo,
// RegisterProcessMetrics) and registered in a registry the caller passes
// in. The packages that produce the numbers (syncloop, pleg, criruntime,
// eviction, probes) each declare the few methods they call as a Metrics
// interface; AgentMetrics and ProbeMetrics satisfy them. Names, label
// names, buckets and help texts are upstream kubelet v1.37's, help
// included with its "[ALPHA] "/"[BETA] " stability prefix, so a scrape
// reads as kubelet's.
//
// The metrics are plain github.com/prometheus/client_golang collectors,
// not k8s.io/component-base/metrics. What component-base adds is its
// stability framework: the prefix in the help text, which is reproduced
// here, and hiding deprecated metrics by the binary's version, which
// fullagent does not offer (showHiddenMetricsForVersion is refused). Its
// lazily-created metrics only come alive once registered in one of its
// KubeRegistries, and its legacyregistry (where its Go, process and
// build-info collectors live) is a global, which library code here may not
// use. client_golang's prometheus.Registerer and Gatherer are what every
// Go program that serves metrics already has, so a vendor can hand the
// agent its own registry.
//
// With Config.TracerProvider every request gets an OpenTelemetry server
// span named by its route (tracing.go), as kubelet's filter on its server.
//
//	pool, err := server.LoadCertPool(clientCAFile)
//	srv, err := server.New(server.Config{
//		NodeName: "node-1",
//		Authenticator: server.UnionAuthenticator(
//			server.NewX509Authenticator(pool, nil),
//			server.NewTokenReviewAuthenticator(cs.AuthenticationV1().TokenReviews(), server.TokenOptions{})),
//		Authorizer: server.NewSubjectAccessReviewAuthorizer(cs.AuthorizationV1().SubjectAccessReviews(), server.AuthorizerOptions{}),
//		Pods:       pods, // a PodLister
//		Runtime:    rt,   // criruntime.Runtime: running pods, log files
//		Streaming:  rt,   // criruntime.Runtime: CRI Exec/Attach/PortForward
//	})
//	go srv.Run(ctx) // :10250 until ctx ends
package server
