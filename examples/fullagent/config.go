package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/featuregate"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/gc"
	"github.com/nodekit/nodekit/kubeletconfig"
)

// loadConfig builds the configuration as kubelet v1.37 does: --config,
// the --config-dir drop-ins over it, upstream's defaults, then the
// command line's configuration flags over all of them; then it validates
// with upstream's rules and refuses what nodekit does not implement: a
// kubelet flag, a configuration field away from its default (fields.go)
// or a feature gate away from its default (implementedGates). Every
// error names the flag, the field or the gate.
func loadConfig(ctx context.Context, o *options) (*kubeletv1beta1.KubeletConfiguration, featuregate.FeatureGate, error) {
	if err := o.checkRefusedFlags(); err != nil {
		return nil, nil, err
	}
	cfg, err := kubeletconfig.Load(ctx, o.config, o.configDir)
	if err != nil {
		return nil, nil, err
	}
	if err := o.applyConfigFlags(cfg); err != nil {
		return nil, nil, fmt.Errorf("command line: %w", err)
	}
	if o.seccompDefault { // kubelet: the flag or the field
		t := true
		cfg.SeccompDefault = &t
	}
	// A flag may have unset something the files set (an empty list).
	if err := kubeletconfig.SetDefaults(cfg); err != nil {
		return nil, nil, err
	}
	gates, err := kubeletconfig.NewGates(ctx, cfg.FeatureGates)
	if err != nil {
		return nil, nil, err
	}
	where := "configuration"
	if o.config != "" {
		where = o.config
	}
	if err := kubeletconfig.Validate(cfg, gates); err != nil {
		return nil, nil, fmt.Errorf("%s: invalid: %w", where, err)
	}
	if err := checkGates(cfg.FeatureGates); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := checkRefusedFields(cfg); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := validateForAgent(cfg, gates); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	return cfg, gates, nil
}

// validateForAgent checks what the agent's packages parse beyond
// kubelet's validation, naming the field.
func validateForAgent(c *kubeletv1beta1.KubeletConfiguration, gates featuregate.FeatureGate) error {
	if _, err := evictionThresholds(c); err != nil {
		return err // names the field and the signal
	}
	if err := checkQOSReserved(c, gates); err != nil {
		return err
	}
	return (gc.ImagePolicy{HighThresholdPercent: int(*c.ImageGCHighThresholdPercent), LowThresholdPercent: int(*c.ImageGCLowThresholdPercent),
		MinAge: c.ImageMinimumGCAge.Duration, MaxAge: c.ImageMaximumGCAge.Duration}).Validate()
}

// checkQOSReserved refuses a qosReserved kubelet would not act on:
// kubelet's QoS manager reserves memory only with the QOSReserved gate
// (alpha, off by default) and with cgroupsPerQOS, and ignores the field
// otherwise; here it is refused then, naming what is missing. Only
// memory can be reserved, as kubelet's ParseQOSReserved.
func checkQOSReserved(c *kubeletv1beta1.KubeletConfiguration, gates featuregate.FeatureGate) error {
	if len(c.QOSReserved) == 0 {
		return nil
	}
	for name := range c.QOSReserved {
		if name != string(v1.ResourceMemory) {
			return fmt.Errorf("qosReserved: cannot reserve %q resource", name)
		}
	}
	if !gates.Enabled(featureQOSReserved) {
		return fmt.Errorf("qosReserved: set, but the %s feature gate is off (kubelet ignores the field then): turn the gate on or leave the field unset", featureQOSReserved)
	}
	if c.CgroupsPerQOS != nil && !*c.CgroupsPerQOS {
		return errors.New("qosReserved: set, but cgroupsPerQOS is false: there are no QoS cgroups to limit")
	}
	return nil
}

// featureQOSReserved is kubelet's QOSReserved gate (alpha).
const featureQOSReserved featuregate.Feature = "QOSReserved"

// featureEventedPLEG is kubelet's EventedPLEG gate.
const featureEventedPLEG featuregate.Feature = "EventedPLEG"

// implementedGates are the gates nodekit honours away from their v1.37
// default, and how. Any other gate set to a non-default value stops the
// agent: nodekit would not behave as the gate asks.
func implementedGates() map[string]string {
	return map[string]string{
		// Turned off, they forbid their fields (kubeletconfig.Validate),
		// and without the fields nodekit's feature is off too.
		"GracefulNodeShutdown":                   "off: shutdownGracePeriod* must be unset",
		"GracefulNodeShutdownBasedOnPodPriority": "off: shutdownGracePeriodByPodPriority must be unset",
		"RotateKubeletServerCertificate":         "off: serverTLSBootstrap must be false",
		"KubeletCrashLoopBackOffMax":             "off: the back-off caps at 300s, as with the gate on and the default",
		"WindowsGracefulNodeShutdown":            "off: Windows only (needed off to turn GracefulNodeShutdown off)",
		// Off, no container restarts all the others; pods asking for it
		// are refused rather than run with the rule ignored.
		"RestartAllContainersOnContainerExits": "off: pods with a RestartAllContainers rule fail admission (PodFeatureUnsupported) and the feature is not declared",
		// Off, no pull records are kept and a present image is used by
		// any pod, as kubelet without the gate (the policy fields must be
		// unset then).
		"KubeletEnsureSecretPulledImages": "off: no image pull records; a present image serves any pod (imagePullCredentialsVerificationPolicy must be unset)",
		// Off, containers' statuses carry no device health, as kubelet
		// without the gates.
		featureResourceHealthStatus:        "off: no allocatedResourcesStatus in container statuses and no DRA health streams",
		featureResourceHealthStatusMessage: "off: allocatedResourcesStatus without the DRA drivers' health messages",
		// The logging gates, honoured by component-base's logs as in
		// kubelet (setupLogging).
		"LoggingAlphaOptions": "on: logging.options split streams and info buffer sizes (component-base logs)",
		"LoggingBetaOptions":  "off: logging.format json is refused (component-base logs)",
		"ContextualLogging":   "off: klog.FromContext gives klog's global logger, as kubelet with the gate off",
		// On, qosReserved is acted on (cgroupmgr); off (the default),
		// the field is refused (checkQOSReserved).
		string(featureQOSReserved): "on: qosReserved[memory] limits the burstable and besteffort QoS cgroups (cgroupmgr), as kubelet's setMemoryReserve",
		// Off (the default), the generic PLEG relists alone every second.
		string(featureEventedPLEG): "on: CRI container events refresh their pods at once, beside the 1 s relist (pleg.Evented), as kubelet v1.37",
	}
}

// checkGates refuses gates set away from their default that nodekit does
// not implement, naming them.
func checkGates(set map[string]bool) error {
	impl := implementedGates()
	var bad []string
	for _, name := range kubeletconfig.NonDefaultGates(set) {
		if _, ok := impl[name]; !ok {
			_, def := kubeletconfig.KnownGate(name)
			bad = append(bad, fmt.Sprintf("%s=%v", name, !def))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("featureGates: %s: not implemented by nodekit (only the v1.37 default value is)", strings.Join(bad, ", "))
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
