package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/nodekit/nodekit/gc"
)

// loadConfig reads an upstream KubeletConfiguration file strictly: an
// unknown field or a wrong kind is an error naming it, so a typo does not
// silently fall back to a default.
func loadConfig(path string) (*kubeletv1beta1.KubeletConfiguration, error) {
	cfg := &kubeletv1beta1.KubeletConfiguration{}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read --config: %w", err)
		}
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("%s: not YAML or JSON: %w", path, err)
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(js, &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if tm.APIVersion != "kubelet.config.k8s.io/v1beta1" || tm.Kind != "KubeletConfiguration" {
			return nil, fmt.Errorf("%s: apiVersion/kind is %q/%q, want kubelet.config.k8s.io/v1beta1/KubeletConfiguration", path, tm.APIVersion, tm.Kind)
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	setDefaults(cfg)
	if err := validate(cfg); err != nil {
		if path == "" {
			path = "configuration"
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// setDefaults fills the fields nodekit uses with upstream's defaults.
func setDefaults(c *kubeletv1beta1.KubeletConfiguration) {
	dur := func(d *metav1.Duration, def time.Duration) {
		if d.Duration == 0 {
			d.Duration = def
		}
	}
	dur(&c.SyncFrequency, time.Minute)
	dur(&c.FileCheckFrequency, 20*time.Second)
	dur(&c.HTTPCheckFrequency, 20*time.Second)
	dur(&c.NodeStatusUpdateFrequency, 10*time.Second)
	dur(&c.NodeStatusReportFrequency, 5*time.Minute)
	dur(&c.RuntimeRequestTimeout, 2*time.Minute)
	if c.NodeLeaseDurationSeconds == 0 {
		c.NodeLeaseDurationSeconds = 40
	}
	if c.MaxPods == 0 {
		c.MaxPods = 110
	}
	if c.Port == 0 {
		c.Port = 10250
	}
	if c.ClusterDomain == "" {
		c.ClusterDomain = "cluster.local"
	}
	if c.PodLogsDir == "" {
		c.PodLogsDir = "/var/log/pods"
	}
	if c.CgroupDriver == "" {
		c.CgroupDriver = "cgroupfs"
	}
	if c.ResolverConfig == nil {
		s := "/etc/resolv.conf"
		c.ResolverConfig = &s
	}
	if c.ContainerRuntimeEndpoint == "" {
		c.ContainerRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	}
	if c.KubeAPIQPS == nil {
		q := int32(50)
		c.KubeAPIQPS = &q
	}
	if c.KubeAPIBurst == 0 {
		c.KubeAPIBurst = 100
	}
	if c.RegisterNode == nil {
		t := true
		c.RegisterNode = &t
	}
	if c.ImageGCHighThresholdPercent == nil {
		v := int32(85)
		c.ImageGCHighThresholdPercent = &v
	}
	if c.ImageGCLowThresholdPercent == nil {
		v := int32(80)
		c.ImageGCLowThresholdPercent = &v
	}
	dur(&c.ImageMinimumGCAge, 2*time.Minute)
	dur(&c.EvictionPressureTransitionPeriod, 5*time.Minute)
	if c.LocalStorageCapacityIsolation == nil {
		t := true
		c.LocalStorageCapacityIsolation = &t
	}
	if c.ContainerLogMaxSize == "" {
		c.ContainerLogMaxSize = "10Mi"
	}
	i32 := func(p **int32, def int32) {
		if *p == nil {
			v := def
			*p = &v
		}
	}
	i32(&c.ContainerLogMaxFiles, 5)
	i32(&c.ContainerLogMaxWorkers, 1)
	i32(&c.RegistryPullQPS, 5)
	if c.RegistryBurst == 0 {
		c.RegistryBurst = 10
	}
	if c.ContainerLogMonitorInterval == nil {
		c.ContainerLogMonitorInterval = &metav1.Duration{Duration: 10 * time.Second}
	}
	// serializeImagePulls stays nil: criruntime applies upstream's rule.
	if c.CgroupsPerQOS == nil {
		t := true
		c.CgroupsPerQOS = &t
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = "/"
	}
	if c.EnforceNodeAllocatable == nil {
		c.EnforceNodeAllocatable = []string{"pods"}
	}
	if c.CPUCFSQuota == nil {
		t := true
		c.CPUCFSQuota = &t
	}
	if c.PodPidsLimit == nil {
		v := int64(-1)
		c.PodPidsLimit = &v
	}
}

// validate checks the values nodekit acts on and names the field at fault.
func validate(c *kubeletv1beta1.KubeletConfiguration) error {
	if c.Port < 1 || c.Port > 65535 {
		return fmt.Errorf("port: %d is not a valid port", c.Port)
	}
	if c.MaxPods < 1 {
		return fmt.Errorf("maxPods: %d must be positive", c.MaxPods)
	}
	for name, d := range map[string]metav1.Duration{
		"syncFrequency": c.SyncFrequency, "fileCheckFrequency": c.FileCheckFrequency,
		"httpCheckFrequency": c.HTTPCheckFrequency, "nodeStatusUpdateFrequency": c.NodeStatusUpdateFrequency,
		"nodeStatusReportFrequency": c.NodeStatusReportFrequency, "runtimeRequestTimeout": c.RuntimeRequestTimeout,
	} {
		if d.Duration < 0 {
			return fmt.Errorf("%s: %v must not be negative", name, d.Duration)
		}
	}
	if c.NodeLeaseDurationSeconds < 1 {
		return fmt.Errorf("nodeLeaseDurationSeconds: %d must be positive", c.NodeLeaseDurationSeconds)
	}
	for i, ip := range c.ClusterDNS {
		if net.ParseIP(ip) == nil {
			return fmt.Errorf("clusterDNS[%d]: %q is not an IP address", i, ip)
		}
	}
	if c.CgroupDriver != "cgroupfs" && c.CgroupDriver != "systemd" {
		return fmt.Errorf("cgroupDriver: %q must be cgroupfs or systemd", c.CgroupDriver)
	}
	for field, m := range map[string]map[string]string{"kubeReserved": c.KubeReserved, "systemReserved": c.SystemReserved} {
		for k, v := range m {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return fmt.Errorf("%s[%s]: %q: %w", field, k, v, err)
			}
			if q.Sign() < 0 {
				return fmt.Errorf("%s[%s]: %q must not be negative", field, k, v)
			}
		}
	}
	if _, err := evictionThresholds(c); err != nil {
		return err // names the field and the signal
	}
	if err := (gc.ImagePolicy{HighThresholdPercent: int(*c.ImageGCHighThresholdPercent), LowThresholdPercent: int(*c.ImageGCLowThresholdPercent),
		MinAge: c.ImageMinimumGCAge.Duration, MaxAge: c.ImageMaximumGCAge.Duration}).Validate(); err != nil {
		return err
	}
	if q, err := resource.ParseQuantity(c.ContainerLogMaxSize); err != nil || q.Sign() <= 0 {
		return fmt.Errorf("containerLogMaxSize: %q is not a positive quantity", c.ContainerLogMaxSize)
	}
	if *c.ContainerLogMaxFiles <= 1 {
		return fmt.Errorf("containerLogMaxFiles: %d must be greater than 1", *c.ContainerLogMaxFiles)
	}
	if *c.ContainerLogMaxWorkers < 1 {
		return fmt.Errorf("containerLogMaxWorkers: %d must be at least 1", *c.ContainerLogMaxWorkers)
	}
	if c.ContainerLogMonitorInterval.Duration < 3*time.Second {
		return fmt.Errorf("containerLogMonitorInterval: %v must be at least 3s", c.ContainerLogMonitorInterval.Duration)
	}
	if c.MaxParallelImagePulls != nil && *c.MaxParallelImagePulls < 1 {
		return fmt.Errorf("maxParallelImagePulls: %d must be positive", *c.MaxParallelImagePulls)
	}
	if *c.RegistryPullQPS < 0 || c.RegistryBurst < 0 {
		return fmt.Errorf("registryPullQPS/registryBurst: %d/%d must not be negative", *c.RegistryPullQPS, c.RegistryBurst)
	}
	if c.EvictionMaxPodGracePeriod < 0 {
		return fmt.Errorf("evictionMaxPodGracePeriod: %d must not be negative", c.EvictionMaxPodGracePeriod)
	}
	for i, t := range c.RegisterWithTaints {
		if err := validTaint(t); err != nil {
			return fmt.Errorf("registerWithTaints[%d]: %w", i, err)
		}
	}
	return nil
}

func validTaint(t v1.Taint) error {
	if t.Key == "" {
		return fmt.Errorf("taint key is empty")
	}
	switch t.Effect {
	case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		return nil
	}
	return fmt.Errorf("taint %q has effect %q; want NoSchedule, PreferNoSchedule or NoExecute", t.Key, t.Effect)
}
