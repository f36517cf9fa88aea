package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

const configHeader = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// loadWith writes config (and drop-ins, name -> content) to a temp dir
// and loads them with the command line args (--config is added).
func loadWith(t *testing.T, config string, dropIns map[string]string, args ...string) (*kubeletv1beta1.KubeletConfiguration, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	writeFile(t, path, config)
	if dropIns != nil {
		d := filepath.Join(dir, "conf.d")
		for name, content := range dropIns {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(d, name)), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(d, name), content)
		}
		args = append(args, "--config-dir="+d)
	}
	o, err := parseFlags(append([]string{"--config=" + path}, args...), io.Discard)
	if err != nil {
		return nil, err
	}
	cfg, _, err := loadConfig(context.Background(), o)
	return cfg, err
}

func TestConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"keys are case-sensitive", "MAXPODS: 7\n", []string{`unknown field "MAXPODS"`}},
		{"duplicate key", "maxPods: 7\nmaxPods: 8\n", []string{"maxPods", "already set"}},
		{"unknown gate", "featureGates: {NoSuchGate: true}\n", []string{"featureGates", "NoSuchGate"}},
		{"gate nodekit does not implement", "featureGates: {APIResponseCompression: false}\n", []string{"featureGates", "APIResponseCompression=false", "not implemented"}},
		{"gate without the gate it needs", "featureGates: {GracefulNodeShutdown: false}\n", []string{"featureGates", "GracefulNodeShutdownBasedOnPodPriority is enabled, but depends on", "GracefulNodeShutdown"}},
		{"gate locked to its default", "featureGates: {InPlacePodVerticalScaling: false}\n", []string{"featureGates", "InPlacePodVerticalScaling", "locked"}},
		{"wrong nested type", "authentication:\n  x509:\n    clientCAFile: {a: b}\n", []string{"authentication.x509.clientCAFile"}},
		{"unknown nested field", "authentication:\n  x509:\n    clientCaFile: /ca\n", []string{`unknown field "authentication.x509.clientCaFile"`}},
		{"invalid value", "imageGCHighThresholdPercent: 101\n", []string{"imageGCHighThresholdPercent"}},
		{"refused unless default", "providerID: aws:///eu-west-1a/i-0123\n", []string{"providerID", "not supported by nodekit"}},
		{"refused unless default, nested", "crashLoopBackOff:\n  maxContainerRestartPeriod: 100s\n", []string{"crashLoopBackOff.maxContainerRestartPeriod", "not supported by nodekit"}},
		{"idsPerPod zero is not the default", "userNamespaces: {idsPerPod: 0}\n", []string{"userNamespaces.idsPerPod", "must not be less than 65536"}},
		{"idsPerPod unaligned", "userNamespaces: {idsPerPod: 100000}\n", []string{"userNamespaces.idsPerPod", "must be a multiple of 65536"}},
		{"refused unless default, two", "podsPerCore: 10\nkernelMemcgNotification: true\n", []string{"podsPerCore", "kernelMemcgNotification"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadWith(t, configHeader+tc.config, nil)
			if err == nil {
				t.Fatal("loadConfig accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestConfigRefusedFieldAtDefault(t *testing.T) {
	// The defaults written out, as generated files do, are accepted, and so
	// are the values that say what nodekit does where the default is a gap.
	cfg, err := loadWith(t, configHeader+"providerID: \"\"\nseccompDefault: false\nhealthzPort: 0\nfailSwapOn: false\nenableServer: true\nfeatureGates: {NodeSwap: true, EventedPLEG: true}\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.FeatureGates["EventedPLEG"] {
		t.Fatal("featureGates lost")
	}
	// Gates nodekit honours away from their default, dependents included.
	if _, err := loadWith(t, configHeader+"featureGates: {GracefulNodeShutdown: false, GracefulNodeShutdownBasedOnPodPriority: false, WindowsGracefulNodeShutdown: false}\n", nil); err != nil {
		t.Fatalf("graceful node shutdown gated off: %v", err)
	}
}

func TestConfigDropInOrder(t *testing.T) {
	cfg, err := loadWith(t, configHeader+"maxPods: 10\nsystemReserved: {cpu: 100m}\n", map[string]string{
		"10-a.conf":        configHeader + "maxPods: 20\nsystemReserved: {memory: 100Mi}\n",
		"20-b.conf":        configHeader + "maxPods: 30\n",
		"99-skipped.yaml":  configHeader + "maxPods: 99\n",
		"30-dir/40-c.conf": configHeader + "nodeLeaseDurationSeconds: 50\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxPods != 30 || cfg.NodeLeaseDurationSeconds != 50 {
		t.Errorf("maxPods %d, nodeLeaseDurationSeconds %d: want 30 (20-b.conf last) and 50 (subdirectory)", cfg.MaxPods, cfg.NodeLeaseDurationSeconds)
	}
	if !reflect.DeepEqual(cfg.SystemReserved, map[string]string{"cpu": "100m", "memory": "100Mi"}) {
		t.Errorf("systemReserved %v: want the drop-in merged into the file's map", cfg.SystemReserved)
	}
	// A drop-in is as strict as the file.
	_, err = loadWith(t, configHeader, map[string]string{"10-a.conf": configHeader + "maxpods: 20\n"})
	if err == nil || !strings.Contains(err.Error(), "10-a.conf") || !strings.Contains(err.Error(), `unknown field "maxpods"`) {
		t.Errorf("a drop-in with a wrong-case key: got %v", err)
	}
}

func TestFlagOverridesFile(t *testing.T) {
	file := configHeader + "maxPods: 50\nclusterDNS: [10.0.0.10]\nevictionHard: {memory.available: 200Mi, nodefs.available: 5%}\n" +
		"featureGates: {EventedPLEG: true, GracefulNodeShutdown: true}\nsyncFrequency: 30s\n"
	cfg, err := loadWith(t, file, map[string]string{"10-pods.conf": configHeader + "maxPods: 70\n"},
		"--max-pods=60", "--cluster-dns=10.0.0.53,10.0.0.54", "--eviction-hard=memory.available<300Mi",
		"--feature-gates=EventedPLEG=false", "--container-runtime-endpoint=unix:///run/x.sock", "--register-with-taints=a=b:NoSchedule")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxPods != 60 {
		t.Errorf("maxPods %d: want the flag's 60 over the file and the drop-in", cfg.MaxPods)
	}
	if !reflect.DeepEqual(cfg.ClusterDNS, []string{"10.0.0.53", "10.0.0.54"}) {
		t.Errorf("clusterDNS %v: want the flag's list", cfg.ClusterDNS)
	}
	if !reflect.DeepEqual(cfg.EvictionHard, map[string]string{"memory.available": "300Mi"}) {
		t.Errorf("evictionHard %v: want the flag's map replacing the file's", cfg.EvictionHard)
	}
	if !reflect.DeepEqual(cfg.FeatureGates, map[string]bool{"EventedPLEG": false, "GracefulNodeShutdown": true}) {
		t.Errorf("featureGates %v: want the file's merged with the flag's, the flag winning", cfg.FeatureGates)
	}
	if cfg.SyncFrequency.Duration != 30*time.Second || cfg.ContainerRuntimeEndpoint != "unix:///run/x.sock" {
		t.Errorf("syncFrequency %v (want the file's 30s), containerRuntimeEndpoint %q", cfg.SyncFrequency.Duration, cfg.ContainerRuntimeEndpoint)
	}
	if len(cfg.RegisterWithTaints) != 1 || cfg.RegisterWithTaints[0].Key != "a" {
		t.Errorf("registerWithTaints %v", cfg.RegisterWithTaints)
	}
}

func TestFlagSeccompDefault(t *testing.T) {
	// kubelet: seccomp by default when the flag or the field says so.
	cfg, err := loadWith(t, configHeader+"seccompDefault: false\n", nil, "--seccomp-default")
	if err != nil || cfg.SeccompDefault == nil || !*cfg.SeccompDefault {
		t.Fatalf("--seccomp-default over seccompDefault: false: %v, %v", err, cfg)
	}
	cfg, err = loadWith(t, configHeader+"seccompDefault: true\n", nil)
	if err != nil || !*cfg.SeccompDefault {
		t.Fatalf("seccompDefault: true without the flag: %v", err)
	}
}

func TestFlagRefused(t *testing.T) {
	if _, err := loadWith(t, configHeader, nil, "--cloud-provider=external"); err == nil || !strings.Contains(err.Error(), "--cloud-provider=external") {
		t.Errorf("--cloud-provider=external: got %v, want it refused by name", err)
	}
	if _, err := loadWith(t, configHeader, nil, "--cloud-provider="); err != nil {
		t.Errorf("--cloud-provider= (the default): %v", err)
	}
	if _, err := loadWith(t, configHeader, nil, "--provider-id=x"); err == nil || !strings.Contains(err.Error(), "providerID") {
		t.Errorf("--provider-id=x: got %v, want providerID refused", err)
	}
	if _, err := parseFlags([]string{"--no-such-flag"}, io.Discard); err == nil || !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("an unknown flag: got %v", err)
	}
	if _, err := parseFlags([]string{"--max-pods=many"}, io.Discard); err == nil || !strings.Contains(err.Error(), "max-pods") {
		t.Errorf("a malformed flag: got %v", err)
	}
}

func TestFlagMaxParallelSandboxCreations(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.sandboxCreations != 2*runtime.NumCPU() {
		t.Fatalf("no flag: %v, %d sandbox creations at once; want twice the CPUs, %d", err, o.sandboxCreations, 2*runtime.NumCPU())
	}
	if o, err := parseFlags([]string{"--max-parallel-sandbox-creations=0"}, io.Discard); err != nil || o.sandboxCreations != 0 {
		t.Fatalf("--max-parallel-sandbox-creations=0 (no bound, as kubelet): %v, %d", err, o.sandboxCreations)
	}
	if _, err := parseFlags([]string{"--max-parallel-sandbox-creations=-1"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--max-parallel-sandbox-creations=-1") {
		t.Fatalf("--max-parallel-sandbox-creations=-1: got %v, want it refused by name", err)
	}
}

// kubeadmConfig is the config.yaml kubeadm v1.37 writes to
// /var/lib/kubelet (the instance configuration's containerRuntimeEndpoint
// merged in), with its zero values spelled out.
const kubeadmConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerLogMaxSize: 10Mi
containerRuntimeEndpoint: "unix:///var/run/containerd/containerd.sock"
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
resolvConf: /run/systemd/resolve/resolv.conf
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
`

// kubeadmFlags are the kubelet's command line on a kubeadm node: the
// systemd drop-in's (10-kubeadm.conf) and kubeadm-flags.env's, as written
// by kubeadm releases before v1.35 and kept on upgraded nodes.
func kubeadmFlags(dir string) []string {
	return []string{
		"--bootstrap-kubeconfig=" + filepath.Join(dir, "bootstrap-kubelet.conf"), "--kubeconfig=" + filepath.Join(dir, "kubelet.conf"),
		"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock", "--pod-infra-container-image=registry.k8s.io/pause:3.10",
		"--node-ip=10.0.0.5", "--hostname-override=node-1",
	}
}

func TestConfigKubeadm(t *testing.T) {
	dir := t.TempDir()
	cfg, err := loadWith(t, kubeadmConfig, nil, kubeadmFlags(dir)...)
	if err != nil {
		t.Fatalf("kubeadm's config.yaml and flags: %v", err)
	}
	if cfg.CgroupDriver != "systemd" || cfg.Authorization.Mode != "Webhook" || !cfg.RotateCertificates ||
		cfg.Authentication.Webhook.CacheTTL.Duration != 2*time.Minute || cfg.ContainerRuntimeEndpoint != "unix:///var/run/containerd/containerd.sock" {
		t.Errorf("not read or defaulted as kubelet does: %+v", cfg)
	}
	o, err := parseFlags(append([]string{"--config=x"}, kubeadmFlags(dir)...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.bootstrapKubeconfig == "" || o.kubeconfig == "" || o.nodeIP != "10.0.0.5" || o.hostnameOverride != "node-1" {
		t.Errorf("node flags not parsed: %+v", o)
	}
}

// TestConfigKubeadmNode starts the fullagent binary as a kubeadm node's
// kubelet unit would: kubeadm's config.yaml (its machine-specific paths
// pointed at this test's, cgroupfs for this machine), the flags of
// 10-kubeadm.conf and an older kubeadm-flags.env, and a --config-dir
// drop-in; the node must register Ready with the drop-in's maxPods and
// run a pod.
func TestConfigKubeadmNode(t *testing.T) {
	body := kubeadmConfig
	for old, repl := range map[string]string{
		"apiVersion: kubelet.config.k8s.io/v1beta1\n":                                "",
		"kind: KubeletConfiguration\n":                                               "",
		"  x509:\n    clientCAFile: /etc/kubernetes/pki/ca.crt\n":                    "", // the proc env has no CA file yet
		"cgroupDriver: systemd\n":                                                    "cgroupDriver: cgroupfs\n",
		"containerRuntimeEndpoint: \"unix:///var/run/containerd/containerd.sock\"\n": "", // --container-runtime-endpoint
		"resolvConf: /run/systemd/resolve/resolv.conf\n":                             "resolvConf: /etc/resolv.conf\n",
		"staticPodPath: /etc/kubernetes/manifests\n":                                 "",
	} {
		if !strings.Contains(body, old) {
			t.Fatalf("kubeadmConfig has no %q", old)
		}
		body = strings.ReplaceAll(body, old, repl)
	}
	dropIns := t.TempDir()
	writeFile(t, filepath.Join(dropIns, "10-max-pods.conf"), configHeader+"maxPods: 42\n")
	e := startProcEnvWith(t, body, "--pod-infra-container-image=registry.k8s.io/pause:3.10", "--config-dir="+dropIns)
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
				if got := n.Status.Capacity.Pods().Value(); got != 42 {
					return false, fmt.Errorf("node capacity pods %d, want the drop-in's 42", got)
				}
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("node not Ready with kubeadm's configuration: %v", err)
	}
	e.createPod(t, simplePod("kubeadm", v1.RestartPolicyAlways, "sleep 3600"))
	e.waitPod(t, "kubeadm", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
}

// qosReserved is acted on with the QOSReserved gate only, as kubelet's QoS
// manager; without the gate (kubelet ignores the field then), without
// cgroupsPerQOS, or for another resource than memory it is refused,
// naming the field.
func TestConfigQOSReserved(t *testing.T) {
	for _, tc := range []struct{ name, config, want string }{
		{"gate on", "featureGates: {QOSReserved: true}\nqosReserved: {memory: 50%}\n", ""},
		{"gate off", "qosReserved: {memory: 50%}\n", "qosReserved: set, but the QOSReserved feature gate is off"},
		{"no cgroupsPerQOS", "featureGates: {QOSReserved: true}\ncgroupsPerQOS: false\nenforceNodeAllocatable: []\nqosReserved: {memory: 50%}\n", "qosReserved: set, but cgroupsPerQOS is false"},
		{"cpu", "featureGates: {QOSReserved: true}\nqosReserved: {cpu: 50%}\n", `qosReserved: cannot reserve "cpu" resource`},
		{"gate on, no field", "featureGates: {QOSReserved: true}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadWith(t, configHeader+tc.config, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			case tc.want == "" && tc.name == "gate on" && cfg.QOSReserved["memory"] != "50%":
				t.Fatalf("qosReserved %v", cfg.QOSReserved)
			}
		})
	}
}
