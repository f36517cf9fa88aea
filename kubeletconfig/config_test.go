package kubeletconfig

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func TestConfigDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"wrong case", header + "MAXPODS: 7\n", `unknown field "MAXPODS"`},
		{"wrong case nested", header + "authentication:\n  X509:\n    clientCAFile: /ca\n", `unknown field "authentication.X509"`},
		{"unknown nested", header + "authentication:\n  x509:\n    clientCAFil: /ca\n", `unknown field "authentication.x509.clientCAFil"`},
		{"duplicate key", header + "maxPods: 7\nmaxPods: 8\n", `"maxPods" already set`},
		{"duplicate key JSON", `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":7,"maxPods":8}`, `"maxPods" already set`},
		{"wrong nested type", header + "authentication:\n  x509:\n    clientCAFile: [a]\n", "authentication.x509.clientCAFile"},
		{"wrong type", header + "maxPods: many\n", "maxPods"},
		{"wrong kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", "apiVersion/kind"},
		{"no apiVersion", "kind: KubeletConfiguration\n", "apiVersion/kind"},
		{"old apiVersion", "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", "apiVersion/kind"},
		{"empty", "\n", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode: got error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestConfigDecodeAccepts(t *testing.T) {
	c, err := Decode([]byte(header + "maxPods: 7\nauthentication:\n  x509:\n    clientCAFile: /ca\nfeatureGates:\n  NodeSwap: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxPods != 7 || c.Authentication.X509.ClientCAFile != "/ca" || !c.FeatureGates["NodeSwap"] {
		t.Fatalf("decoded %+v", c)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestConfigDropInMergeOrder(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "config.yaml")
	write(t, base, header+"maxPods: 10\nclusterDNS: [10.0.0.10, 10.0.0.11]\nsystemReserved: {cpu: 100m, memory: 100Mi}\nstaticPodPath: manifests\n")
	d := filepath.Join(dir, "conf.d")
	write(t, filepath.Join(d, "20-pods.conf"), header+"maxPods: 30\n")
	write(t, filepath.Join(d, "10-pods.conf"), header+"maxPods: 20\nclusterDNS: [10.0.0.53]\nsystemReserved: {memory: 200Mi}\n")
	write(t, filepath.Join(d, "30-ignored.yaml"), header+"maxPods: 99\n")
	write(t, filepath.Join(d, "40-sub", "50-lease.conf"), header+"nodeLeaseDurationSeconds: 77\n")
	c, err := Load(context.Background(), base, d)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxPods != 30 {
		t.Errorf("maxPods = %d, want 30 (20-pods.conf after 10-pods.conf; .yaml skipped)", c.MaxPods)
	}
	if len(c.ClusterDNS) != 1 || c.ClusterDNS[0] != "10.0.0.53" {
		t.Errorf("clusterDNS = %v, want the drop-in's list, replaced whole", c.ClusterDNS)
	}
	if c.SystemReserved["cpu"] != "100m" || c.SystemReserved["memory"] != "200Mi" {
		t.Errorf("systemReserved = %v, want maps merged key by key", c.SystemReserved)
	}
	if c.NodeLeaseDurationSeconds != 77 {
		t.Errorf("nodeLeaseDurationSeconds = %d, want 77 from a subdirectory", c.NodeLeaseDurationSeconds)
	}
	if c.StaticPodPath != filepath.Join(dir, "manifests") {
		t.Errorf("staticPodPath = %q, want it resolved against the file's directory", c.StaticPodPath)
	}
	if c.MaxOpenFiles != 1000000 || c.SyncFrequency.Duration != time.Minute {
		t.Errorf("defaults lost through the merge: maxOpenFiles %d, syncFrequency %v", c.MaxOpenFiles, c.SyncFrequency)
	}
}

func TestConfigDropInStrict(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "10-bad.conf"), header+"maxpods: 3\n")
	_, err := Load(context.Background(), "", dir)
	if err == nil || !strings.Contains(err.Error(), "10-bad.conf") || !strings.Contains(err.Error(), `unknown field "maxpods"`) {
		t.Fatalf("Load: got %v, want the drop-in and its unknown field named", err)
	}
	write(t, filepath.Join(dir, "10-bad.conf"), "maxPods: 3\n")
	if _, err := Load(context.Background(), "", dir); err == nil || !strings.Contains(err.Error(), "apiVersion/kind") {
		t.Fatalf("Load: got %v, want a drop-in without apiVersion/kind refused", err)
	}
}

func TestConfigGates(t *testing.T) {
	if _, err := NewGates(context.Background(), map[string]bool{"NoSuchGate": true}); err == nil || !strings.Contains(err.Error(), "NoSuchGate") {
		t.Fatalf("NewGates: got %v, want the unknown gate named", err)
	}
	c, err := Decode([]byte(header + "featureGates: {NoSuchGate: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := SetDefaults(c); err == nil || !strings.Contains(err.Error(), "featureGates: unrecognized feature gate: NoSuchGate") {
		t.Fatalf("SetDefaults: got %v, want featureGates and the gate named", err)
	}
	_, err = NewGates(context.Background(), map[string]bool{"InPlacePodVerticalScaling": true, "PodLevelResources": false, "PodLevelResourceManagers": true})
	if err == nil || !strings.Contains(err.Error(), "PodLevelResourceManagers") {
		t.Fatalf("a gate enabled without the gate it needs: got %v", err)
	}
	g, err := NewGates(context.Background(), map[string]bool{"NodeSwap": true})
	if err != nil || !g.Enabled("NodeSwap") {
		t.Fatalf("NewGates: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"negative maxPods", "maxPods: -1\n", "maxPods"},
		{"port", "port: 70000\n", "port"},
		{"image GC order", "imageGCHighThresholdPercent: 50\nimageGCLowThresholdPercent: 60\n", "imageGCLowThresholdPercent"},
		{"log files", "containerLogMaxFiles: 1\n", "containerLogMaxFiles"},
		{"topology", "topologyManagerPolicy: best\n", "topologyManagerPolicy"},
		{"enforce", "enforceNodeAllocatable: [pods, kube-reserved]\n", "kubeReservedCgroup"},
		{"shutdown", "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n", "shutdownGracePeriodCriticalPods"},
		{"parallel pulls", "serializeImagePulls: true\nmaxParallelImagePulls: 3\n", "maxParallelImagePulls"},
		{"pod logs dir", "podLogsDir: /var/log/../pods\n", "podLogsDir"},
		{"cluster DNS", "clusterDNS: [notanip]\n", "clusterDNS[0]"},
		{"reserved", "kubeReserved: {cpu: lots}\n", "kubeReserved[cpu]"},
		{"taint", "registerWithTaints: [{key: a, effect: Sometimes}]\n", "registerWithTaints[0].effect"},
		{"logging", "logging: {format: xml}\n", "logging.format"},
		{"logging options", "logging: {options: {text: {splitStream: true}}}\n", "logging.options.text.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled"},
		{"tracing rate", "tracing: {samplingRatePerMillion: 1000001}\n", "tracing.samplingRatePerMillion"},
		{"tracing endpoint", "tracing: {endpoint: 'http://collector:4317'}\n", "tracing.endpoint: Invalid value: \"http://collector:4317\": unsupported scheme: http"},
		// Set, even to 0, idsPerPod is checked as kubelet does; only
		// absent means the default.
		{"idsPerPod zero", "userNamespaces: {idsPerPod: 0}\n", "userNamespaces.idsPerPod: Invalid value: 0: must not be less than 65536"},
		{"idsPerPod small", "userNamespaces: {idsPerPod: 1000}\n", "userNamespaces.idsPerPod: Invalid value: 1000: must not be less than 65536"},
		{"idsPerPod unaligned", "userNamespaces: {idsPerPod: 65537}\n", "userNamespaces.idsPerPod: Invalid value: 65537: must be a multiple of 65536"},
		{"idsPerPod huge", "userNamespaces: {idsPerPod: 4294967296}\n", "userNamespaces.idsPerPod: Invalid value: 4294967296: must not be more than 4294967295"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Decode([]byte(header + tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if err := SetDefaults(c); err != nil {
				t.Fatal(err)
			}
			g, _ := NewGates(context.Background(), c.FeatureGates)
			err = Validate(c, g)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: got %v, want an error naming %q", err, tc.want)
			}
		})
	}
	c := &kubeletv1beta1.KubeletConfiguration{}
	if err := SetDefaults(c); err != nil {
		t.Fatal(err)
	}
	g, _ := NewGates(context.Background(), nil)
	if err := Validate(c, g); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	rate := int32(1000000)
	c.Tracing = &tracingapi.TracingConfiguration{Endpoint: ptr.To("127.0.0.1:4317"), SamplingRatePerMillion: &rate}
	if err := Validate(c, g); err != nil {
		t.Fatalf("tracing: %v", err)
	}
	c.Tracing = nil
	for _, n := range []int64{65536, 65536 * 4} {
		c.UserNamespaces = &kubeletv1beta1.UserNamespaces{IDsPerPod: &n}
		if err := Validate(c, g); err != nil {
			t.Fatalf("userNamespaces.idsPerPod %d: %v", n, err)
		}
	}
}
