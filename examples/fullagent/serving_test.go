package main

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/server"
)

// The serving fields of the KubeletConfiguration reach server.Config with
// upstream's defaults; values nodekit cannot honour fail naming the field.
func TestServingConfig(t *testing.T) {
	ctx := context.Background()
	var sc server.Config
	if err := servingConfig(ctx, &kubeletv1beta1.KubeletConfiguration{Port: 10250}, &sc); err != nil {
		t.Fatal(err)
	}
	if sc.DisableSecurePort || sc.DisableDebuggingHandlers || sc.TLSMinVersion != tls.VersionTLS12 || sc.CipherSuites != nil ||
		sc.CurvePreferences != nil || sc.StreamingIdleTimeout != 4*time.Hour || sc.Port != 10250 || sc.ReadOnlyPort != 0 || sc.SystemLogDir != "/var/log" ||
		sc.DisableProfilingHandler || sc.SetVerbosity == nil {
		t.Fatalf("defaults: %+v", sc)
	}

	cfg := &kubeletv1beta1.KubeletConfiguration{
		Address: "10.88.0.1", Port: 11250, ReadOnlyPort: 10255,
		EnableServer: ptr.To(false), EnableDebuggingHandlers: ptr.To(false), EnableSystemLogHandler: ptr.To(false),
		EnableProfilingHandler: ptr.To(false), EnableDebugFlagsHandler: ptr.To(false),
		TLSMinVersion:                  "VersionTLS13",
		TLSCipherSuites:                []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"},
		TLSCurvePreferences:            []int32{23, 4588},
		StreamingConnectionIdleTimeout: metav1.Duration{Duration: 5 * time.Minute},
	}
	sc = server.Config{}
	if err := servingConfig(ctx, cfg, &sc); err != nil {
		t.Fatal(err)
	}
	if !sc.DisableSecurePort || !sc.DisableDebuggingHandlers || sc.TLSMinVersion != tls.VersionTLS13 ||
		len(sc.CipherSuites) != 1 || sc.CipherSuites[0] != tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 ||
		len(sc.CurvePreferences) != 2 || sc.CurvePreferences[1] != tls.X25519MLKEM768 ||
		sc.StreamingIdleTimeout != 5*time.Minute || sc.SystemLogDir != "" || sc.Address != "10.88.0.1" || sc.Port != 11250 || sc.ReadOnlyPort != 10255 ||
		!sc.DisableProfilingHandler || sc.SetVerbosity != nil {
		t.Fatalf("set: %+v", sc)
	}

	for _, tc := range []struct {
		name  string
		tweak func(*kubeletv1beta1.KubeletConfiguration)
		want  string
	}{
		{"tls version", func(c *kubeletv1beta1.KubeletConfiguration) { c.TLSMinVersion = "TLS1.3" }, "tlsMinVersion: "},
		{"cipher", func(c *kubeletv1beta1.KubeletConfiguration) {
			c.TLSCipherSuites = []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_FAST"}
		}, `tlsCipherSuites[1]: cipher suite "TLS_FAST"`},
		{"curve", func(c *kubeletv1beta1.KubeletConfiguration) { c.TLSCurvePreferences = []int32{23, 4242} }, "tlsCurvePreferences[1]: curve 4242"},
		{"key without cert", func(c *kubeletv1beta1.KubeletConfiguration) { c.TLSPrivateKeyFile = "/k.pem" }, "tlsCertFile and tlsPrivateKeyFile"},
		{"idle", func(c *kubeletv1beta1.KubeletConfiguration) { c.StreamingConnectionIdleTimeout.Duration = -time.Second }, "streamingConnectionIdleTimeout: "},
		{"read-only port", func(c *kubeletv1beta1.KubeletConfiguration) { c.ReadOnlyPort = 70000 }, "readOnlyPort: "},
		{"log query", func(c *kubeletv1beta1.KubeletConfiguration) { c.EnableSystemLogQuery = ptr.To(true) }, "enableSystemLogQuery: "},
		{"address", func(c *kubeletv1beta1.KubeletConfiguration) { c.Address = "node.example" }, "address: "},
	} {
		c := &kubeletv1beta1.KubeletConfiguration{Port: 10250}
		tc.tweak(c)
		err := servingConfig(ctx, c, &server.Config{})
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error starting %q", tc.name, err, tc.want)
		}
	}
}

func TestHealthzServerConfig(t *testing.T) {
	h, err := healthzServer(&kubeletv1beta1.KubeletConfiguration{})
	if err != nil || h == nil || h.Address != "127.0.0.1" || h.Port != 10248 {
		t.Fatalf("default: %+v %v", h, err)
	}
	h, err = healthzServer(&kubeletv1beta1.KubeletConfiguration{HealthzPort: ptr.To[int32](0)})
	if err != nil || h != nil {
		t.Fatalf("healthzPort 0: %+v %v", h, err)
	}
	h, err = healthzServer(&kubeletv1beta1.KubeletConfiguration{HealthzPort: ptr.To[int32](11248), HealthzBindAddress: "0.0.0.0"})
	if err != nil || h.Address != "0.0.0.0" || h.Port != 11248 {
		t.Fatalf("set: %+v %v", h, err)
	}
	for _, c := range []*kubeletv1beta1.KubeletConfiguration{
		{HealthzPort: ptr.To[int32](-1)}, {HealthzPort: ptr.To[int32](65536)}, {HealthzBindAddress: "localhost"},
	} {
		if _, err := healthzServer(c); err == nil || !strings.HasPrefix(err.Error(), "healthz") {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
