package podconfig

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validatePod checks what a node agent needs to be true of a static pod
// before it can run it. It is not the API server's full validation: it
// covers names, uniqueness, required fields, enums the agent switches on,
// and the references to API objects a static pod may not make. prefix goes
// before every field path ("items[3]." in a PodList).
func validatePod(pod *v1.Pod, prefix string) []FieldError {
	v := validator{prefix: prefix}
	meta := field.NewPath("metadata")
	if pod.Name == "" {
		v.add(meta.Child("name"), "required")
	} else {
		v.dnsSubdomain(meta.Child("name"), pod.Name)
	}
	if pod.Namespace != "" {
		v.dnsLabel(meta.Child("namespace"), pod.Namespace)
	}

	spec := field.NewPath("spec")
	if len(pod.Spec.Containers) == 0 {
		v.add(spec.Child("containers"), "at least one container is required")
	}
	if len(pod.Spec.EphemeralContainers) > 0 {
		v.add(spec.Child("ephemeralContainers"), "not allowed in a static pod")
	}
	volumes := sets.New[string]()
	for i, vol := range pod.Spec.Volumes {
		p := spec.Child("volumes").Index(i)
		if vol.Name == "" {
			v.add(p.Child("name"), "required")
		} else if volumes.Has(vol.Name) {
			v.add(p.Child("name"), fmt.Sprintf("duplicate volume name %q", vol.Name))
		} else {
			v.dnsLabel(p.Child("name"), vol.Name)
			volumes.Insert(vol.Name)
		}
		if ref := volumeAPIReference(&vol.VolumeSource); ref != "" {
			v.add(p, "static pods may not reference "+ref)
		}
	}
	names := sets.New[string]()
	for i := range pod.Spec.InitContainers {
		v.container(spec.Child("initContainers").Index(i), &pod.Spec.InitContainers[i], names, volumes)
	}
	for i := range pod.Spec.Containers {
		v.container(spec.Child("containers").Index(i), &pod.Spec.Containers[i], names, volumes)
	}
	v.enum(spec.Child("restartPolicy"), string(pod.Spec.RestartPolicy),
		v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever)
	v.enum(spec.Child("dnsPolicy"), string(pod.Spec.DNSPolicy),
		v1.DNSClusterFirst, v1.DNSClusterFirstWithHostNet, v1.DNSDefault, v1.DNSNone)
	if pod.Spec.ServiceAccountName != "" || pod.Spec.DeprecatedServiceAccount != "" {
		v.add(spec.Child("serviceAccountName"), "static pods may not reference serviceaccounts")
	}
	for i, s := range pod.Spec.ImagePullSecrets {
		if s.Name != "" {
			v.add(spec.Child("imagePullSecrets").Index(i), "static pods may not reference secrets")
		}
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		v.add(spec.Child("resourceClaims"), "static pods may not reference resourceclaims")
	}
	return v.errs
}

type validator struct {
	prefix string
	errs   []FieldError
}

func (v *validator) add(p *field.Path, detail string) {
	v.errs = append(v.errs, FieldError{Field: v.prefix + p.String(), Detail: detail})
}

func (v *validator) dnsLabel(p *field.Path, s string) {
	if msgs := validation.IsDNS1123Label(s); len(msgs) > 0 {
		v.add(p, fmt.Sprintf("invalid value %q: %s", s, strings.Join(msgs, "; ")))
	}
}

func (v *validator) dnsSubdomain(p *field.Path, s string) {
	if msgs := validation.IsDNS1123Subdomain(s); len(msgs) > 0 {
		v.add(p, fmt.Sprintf("invalid value %q: %s", s, strings.Join(msgs, "; ")))
	}
}

// enum checks that s, if set, is one of allowed (typed string constants).
func (v *validator) enum(p *field.Path, s string, allowed ...any) {
	if s == "" {
		return
	}
	var names []string
	for _, a := range allowed {
		n := fmt.Sprint(a)
		if n == s {
			return
		}
		names = append(names, n)
	}
	v.add(p, fmt.Sprintf("unsupported value %q: must be one of %s", s, strings.Join(names, ", ")))
}

func (v *validator) container(p *field.Path, c *v1.Container, names, volumes sets.Set[string]) {
	switch {
	case c.Name == "":
		v.add(p.Child("name"), "required")
	case names.Has(c.Name):
		v.add(p.Child("name"), fmt.Sprintf("duplicate container name %q", c.Name))
	default:
		v.dnsLabel(p.Child("name"), c.Name)
		names.Insert(c.Name)
	}
	if strings.TrimSpace(c.Image) == "" {
		v.add(p.Child("image"), "required")
	} else if c.Image != strings.TrimSpace(c.Image) {
		v.add(p.Child("image"), "must not have leading or trailing whitespace")
	}
	v.enum(p.Child("imagePullPolicy"), string(c.ImagePullPolicy), v1.PullAlways, v1.PullIfNotPresent, v1.PullNever)
	v.enum(p.Child("terminationMessagePolicy"), string(c.TerminationMessagePolicy),
		v1.TerminationMessageReadFile, v1.TerminationMessageFallbackToLogsOnError)
	for i, port := range c.Ports {
		pp := p.Child("ports").Index(i)
		if port.ContainerPort < 1 || port.ContainerPort > 65535 {
			v.add(pp.Child("containerPort"), fmt.Sprintf("must be between 1 and 65535, got %d", port.ContainerPort))
		}
		if port.HostPort < 0 || port.HostPort > 65535 {
			v.add(pp.Child("hostPort"), fmt.Sprintf("must be between 0 and 65535, got %d", port.HostPort))
		}
		v.enum(pp.Child("protocol"), string(port.Protocol), v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP)
	}
	for i, m := range c.VolumeMounts {
		mp := p.Child("volumeMounts").Index(i)
		if !volumes.Has(m.Name) {
			v.add(mp.Child("name"), fmt.Sprintf("no volume named %q", m.Name))
		}
		if m.MountPath == "" {
			v.add(mp.Child("mountPath"), "required")
		}
	}
	for i, e := range c.Env {
		if e.ValueFrom == nil {
			continue
		}
		ep := p.Child("env").Index(i).Child("valueFrom")
		if e.ValueFrom.SecretKeyRef != nil {
			v.add(ep.Child("secretKeyRef"), "static pods may not reference secrets")
		}
		if e.ValueFrom.ConfigMapKeyRef != nil {
			v.add(ep.Child("configMapKeyRef"), "static pods may not reference configmaps")
		}
	}
	for i, e := range c.EnvFrom {
		ep := p.Child("envFrom").Index(i)
		if e.SecretRef != nil {
			v.add(ep.Child("secretRef"), "static pods may not reference secrets")
		}
		if e.ConfigMapRef != nil {
			v.add(ep.Child("configMapRef"), "static pods may not reference configmaps")
		}
	}
	probes := []struct {
		name  string
		probe *v1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}}
	for _, np := range probes {
		name, probe := np.name, np.probe
		if probe == nil {
			continue
		}
		handlers := 0
		for _, set := range []bool{probe.Exec != nil, probe.HTTPGet != nil, probe.TCPSocket != nil, probe.GRPC != nil} {
			if set {
				handlers++
			}
		}
		if handlers != 1 {
			v.add(p.Child(name), "must specify exactly one of exec, httpGet, tcpSocket, grpc")
		}
	}
}

// volumeAPIReference names the API objects a volume source needs, or "" if
// it needs none. Static pods run without the API server, so they may not use
// such volumes (as upstream).
func volumeAPIReference(s *v1.VolumeSource) string {
	switch {
	case s.ConfigMap != nil:
		return "configmaps (via configmap volumes)"
	case s.Secret != nil:
		return "secrets (via secret volumes)"
	case s.CSI != nil:
		return "csidrivers (via CSI volumes)"
	case s.Glusterfs != nil:
		return "endpoints (via glusterfs volumes)"
	case s.PersistentVolumeClaim != nil:
		return "persistentvolumeclaims"
	case s.Ephemeral != nil:
		return "persistentvolumeclaims (via ephemeral volumes)"
	case s.AzureFile != nil:
		return "secrets (via azureFile volumes)"
	case s.Projected != nil:
		for _, src := range s.Projected.Sources {
			switch {
			case src.ConfigMap != nil:
				return "configmaps (via projected volumes)"
			case src.Secret != nil:
				return "secrets (via projected volumes)"
			case src.ServiceAccountToken != nil:
				return "serviceaccounts (via projected volumes)"
			case src.ClusterTrustBundle != nil:
				return "clustertrustbundles (via projected volumes)"
			case src.PodCertificate != nil:
				return "podcertificates (via projected volumes)"
			}
		}
	}
	return ""
}
