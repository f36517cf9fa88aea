// Package kubeletconfig reads the upstream KubeletConfiguration
// (kubelet.config.k8s.io/v1beta1) as kubelet v1.37 does, but strictly: a
// base file plus --config-dir drop-ins merged over it, upstream's
// defaults, upstream's validation rules and the v1.37 feature-gate list.
//
// It owns decoding (case-sensitive; unknown fields, duplicate keys, a wrong
// apiVersion/kind or a wrong type are errors naming the field path),
// drop-in merging, defaulting, validation and resolving featureGates into
// a featuregate.FeatureGate value (no global gate). It does not own what
// an agent does with a field: an agent that does not act on a field
// decides itself whether to refuse it (see examples/fullagent/fields.go),
// and command-line flags are the agent's (apply them between Load and
// Validate, as kubelet lets flags override the files).
//
//	cfg, err := kubeletconfig.Load(ctx, "/var/lib/kubelet/config.yaml", "/etc/kubernetes/kubelet.conf.d")
//	// ... apply flags to cfg ...
//	gates, err := kubeletconfig.NewGates(ctx, cfg.FeatureGates)
//	err = kubeletconfig.Validate(cfg, gates)
package kubeletconfig
