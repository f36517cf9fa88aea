package kubeletconf

import (
	"testing"
	"time"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// The lines are a KubeletConfiguration with no field it does not know, and
// carry the caller's values.
func TestConfigDecodesStrictly(t *testing.T) {
	conf := Common(Node{PodLogsDir: "/logs", RuntimeEndpoint: "unix:///c.sock", Address: "10.88.3.1",
		CgroupRoot: "/nk", ClientCAFile: "/ca.crt", Extra: "syncFrequency: 5s\n"}) + KubeletOnly("10.88.3.1")
	var got kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict([]byte(conf), &got); err != nil {
		t.Fatalf("%v\n%s", err, conf)
	}
	if got.Kind != "KubeletConfiguration" || got.PodLogsDir != "/logs" || got.ContainerRuntimeEndpoint != "unix:///c.sock" ||
		got.Address != "10.88.3.1" || got.CgroupRoot != "/nk" || got.SyncFrequency.Duration != 5*time.Second ||
		got.HealthzBindAddress != "10.88.3.1" || got.FailCgroupV1 == nil || *got.FailCgroupV1 ||
		got.Authentication.X509.ClientCAFile != "/ca.crt" || got.CgroupDriver != "cgroupfs" {
		t.Errorf("decoded %+v from\n%s", got, conf)
	}
	if c := Common(Node{}); len(c) == 0 || yaml.UnmarshalStrict([]byte(c), &kubeletv1beta1.KubeletConfiguration{}) != nil {
		t.Errorf("without a cgroup root: %q", c)
	}
	// The healthz address set for both agents: the kubelet's lines do not
	// repeat it (a duplicate key fails strict decoding).
	both := Common(Node{Address: "10.88.3.1", HealthzAddress: "10.88.3.1"}) + KubeletOnly("")
	got = kubeletv1beta1.KubeletConfiguration{}
	if err := yaml.UnmarshalStrict([]byte(both), &got); err != nil || got.HealthzBindAddress != "10.88.3.1" {
		t.Errorf("healthz for both agents: %q, %v\n%s", got.HealthzBindAddress, err, both)
	}
}
