package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/server"
)

// newAPIServer builds the node API on cfg.Address:cfg.Port (logs, exec,
// attach, port-forward, metrics, stats, healthz) from the
// KubeletConfiguration's authentication, authorization and TLS settings.
// It also returns the rotating serving certificate when
// serverTLSBootstrap is set (nil otherwise), whose Run must be started.
func (a *agent) newAPIServer(ctx context.Context, o *options, nodeIPs []string) (*server.Server, *server.CSRCertificate, *agentMetrics, error) {
	cfg := a.cfg
	reg, probeReg := a.metrics.reg, a.metrics.probeReg
	if err := a.watchCertificate(); err != nil {
		return nil, nil, nil, err
	}
	cm, err := a.containerMetrics(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	configz := cfg.DeepCopy()
	configz.APIVersion, configz.Kind = "kubelet.config.k8s.io/v1beta1", "KubeletConfiguration"
	sc := server.Config{
		NodeName:  a.nodeName,
		Pods:      server.PodListerFunc(a.podsWithStatus),
		Runtime:   a.runtime,
		Streaming: a.runtime,
		HealthChecks: []server.HealthCheck{
			server.NamedCheck("syncloop", a.loop.Healthy),
			server.NamedCheck("pleg", a.pleg.Healthy),
		},
		Metrics: reg, ProbeMetrics: probeReg, MetricsRegisterer: reg, ContainerMetrics: cm,
		Configz: configz,
		Stats:   a.stats,
		// The node declares ExtendWebSocketsToKubelet with the gate on
		// (declaredfeatures.go): the API server then sends WebSocket v5
		// exec/attach and tunneled port-forward callers here unchanged.
		TranslateWebSockets: a.gates.Enabled("ExtendWebSocketsToKubelet"),
	}
	if a.tracer != nil {
		sc.TracerProvider = a.tracer // a server span per node API request, as kubelet's
	}
	zpages(o, a.gates, &sc)
	if err := servingConfig(ctx, cfg, &sc); err != nil {
		return nil, nil, nil, err
	}

	if err := a.apiAuthentication(&sc); err != nil {
		return nil, nil, nil, err
	}
	if err := a.apiAuthorization(&sc); err != nil {
		return nil, nil, nil, err
	}
	rotating, err := a.servingCertificate(o, nodeIPs, &sc)
	if err != nil {
		return nil, nil, nil, err
	}
	srv, err := server.New(sc)
	if err != nil {
		return nil, nil, nil, err
	}
	return srv, rotating, a.metrics, nil
}

// apiAuthentication sets the node API's authenticators: client
// certificates, bearer tokens (TokenReview), anonymous.
func (a *agent) apiAuthentication(sc *server.Config) error {
	cfg := a.cfg
	var authns []server.Authenticator
	if f := cfg.Authentication.X509.ClientCAFile; f != "" {
		pool, err := server.LoadCertPool(f)
		if err != nil {
			return fmt.Errorf("authentication.x509.clientCAFile: %w", err)
		}
		authns = append(authns, server.NewX509Authenticator(pool, nil))
	}
	// Standalone, webhook authentication and authorization were refused
	// at start (checkStandaloneAuth); the errors here are a second guard.
	if webhookAuthn(cfg) {
		if a.client == nil {
			return errStandaloneAuthn
		}
		// cacheTTL 0 is upstream's default (2m); negative caches nothing,
		// as upstream.
		authns = append(authns, server.NewTokenReviewAuthenticator(a.client.AuthenticationV1().TokenReviews(),
			server.TokenOptions{TTL: cfg.Authentication.Webhook.CacheTTL.Duration}))
	}
	sc.Authenticator = server.UnionAuthenticator(authns...)
	sc.AllowAnonymous = cfg.Authentication.Anonymous.Enabled != nil && *cfg.Authentication.Anonymous.Enabled
	return nil
}

// apiAuthorization sets the node API's authorizer: SubjectAccessReview
// (Webhook, the default) or AlwaysAllow.
func (a *agent) apiAuthorization(sc *server.Config) error {
	cfg := a.cfg
	switch cfg.Authorization.Mode {
	case kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow:
		sc.Authorizer = server.AlwaysAllow{}
	case kubeletv1beta1.KubeletAuthorizationModeWebhook:
		if a.client == nil {
			return errStandaloneAuthz
		}
		// As the token cache: 0 means upstream's defaults (5m, 30s),
		// negative caches nothing.
		sc.Authorizer = server.NewSubjectAccessReviewAuthorizer(a.client.AuthorizationV1().SubjectAccessReviews(), server.AuthorizerOptions{
			AllowTTL: cfg.Authorization.Webhook.CacheAuthorizedTTL.Duration,
			DenyTTL:  cfg.Authorization.Webhook.CacheUnauthorizedTTL.Duration,
		})
	default:
		return fmt.Errorf("authorization.mode: %q is not Webhook or AlwaysAllow", cfg.Authorization.Mode)
	}
	return nil
}

// servingCertificate sets the node API's serving certificate: files, a
// rotating CSR-issued one (returned, nil otherwise), or self-signed.
func (a *agent) servingCertificate(o *options, nodeIPs []string, sc *server.Config) (*server.CSRCertificate, error) {
	cfg := a.cfg
	var ips []net.IP
	for _, s := range nodeIPs {
		ips = append(ips, net.ParseIP(s))
	}
	var err error
	switch {
	// serverTLSBootstrap wins over tlsCertFile, as upstream.
	case cfg.ServerTLSBootstrap && a.client != nil && !sc.DisableSecurePort:
		rotating, err := server.NewCSRCertificate(server.CSRConfig{
			Client: a.client.CertificatesV1().CertificateSigningRequests(), NodeName: a.nodeName,
			IPs: ips, DNSNames: []string{a.nodeName}, Dir: filepath.Join(o.rootDir, "pki"),
			Metrics: a.metrics.reg,
		})
		if err != nil {
			return nil, err
		}
		sc.Certificate = rotating
		return rotating, nil
	case cfg.TLSCertFile != "":
		if sc.Certificate, err = server.LoadCertificateFiles(cfg.TLSCertFile, cfg.TLSPrivateKeyFile); err != nil {
			return nil, fmt.Errorf("tlsCertFile, tlsPrivateKeyFile: %w", err)
		}
	default:
		if sc.Certificate, err = server.NewSelfSignedCertificate(a.nodeName, ips, nil, nil); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// The start-up errors of webhook authentication and authorization without
// an API server, in kubelet's words (BuildAuthn, BuildAuthz) with the field
// and what to set instead.
var (
	errStandaloneAuthn = errors.New("authentication.webhook.enabled: true without --kubeconfig: no client provided, cannot use webhook authentication " +
		"(set authentication.webhook.enabled: false to run standalone)")
	errStandaloneAuthz = errors.New("authorization.mode: Webhook without --kubeconfig: no client provided, cannot use webhook authorization " +
		"(set authorization.mode: AlwaysAllow to run standalone)")
)

// webhookAuthn is authentication.webhook.enabled (defaulted to true).
func webhookAuthn(cfg *kubeletv1beta1.KubeletConfiguration) bool {
	return cfg.Authentication.Webhook.Enabled == nil || *cfg.Authentication.Webhook.Enabled
}

// checkStandaloneAuth is called when the agent runs standalone (no
// --kubeconfig): it refuses webhook authentication and webhook
// authorization, as kubelet v1.37 does: with no
// API server there is nobody to review tokens or access, and kubelet does
// not fall back to something weaker. It runs whether or not the node API
// is served (enableServer), as kubelet builds its authenticator either way.
// Both refusals are reported at once; kubelet stops at the first.
func checkStandaloneAuth(cfg *kubeletv1beta1.KubeletConfiguration) error {
	var errs []error
	if webhookAuthn(cfg) {
		errs = append(errs, errStandaloneAuthn)
	}
	if cfg.Authorization.Mode == kubeletv1beta1.KubeletAuthorizationModeWebhook {
		errs = append(errs, errStandaloneAuthz)
	}
	return errors.Join(errs...)
}

// podsWithStatus is /pods: the loop's pods with the status the agent
// computed (the pod objects carry the API server's).
func (a *agent) podsWithStatus() []*v1.Pod {
	pods := a.pods.Pods()
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		if st, ok := a.status.GetPodStatus(p.UID); ok {
			c := *p
			c.Status = st
			p = &c
		}
		out = append(out, p)
	}
	return out
}
