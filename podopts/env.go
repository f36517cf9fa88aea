package podopts

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/expansion"
)

// ConfigMapGetter returns a ConfigMap. A missing one must yield an error for
// which apierrors.IsNotFound is true; its message reaches the pod status
// verbatim, so upstream's wording is `configmap "NAME" not found`.
type ConfigMapGetter interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
}

// SecretGetter returns a Secret, with the same not-found contract as
// ConfigMapGetter (`secret "NAME" not found`).
type SecretGetter interface {
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// ServiceLister lists the Services of one namespace. It is called for the
// pod's namespace and for "default" (for the kubernetes service). An
// implementation backed by an informer should not answer before its first
// sync, or early pods miss KUBERNETES_SERVICE_HOST.
type ServiceLister interface {
	ListServices(ctx context.Context, namespace string) ([]*v1.Service, error)
}

// ConfigMapGetterFunc adapts a function to ConfigMapGetter.
type ConfigMapGetterFunc func(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)

// GetConfigMap calls f.
func (f ConfigMapGetterFunc) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return f(ctx, namespace, name)
}

// SecretGetterFunc adapts a function to SecretGetter.
type SecretGetterFunc func(ctx context.Context, namespace, name string) (*v1.Secret, error)

// GetSecret calls f.
func (f SecretGetterFunc) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return f(ctx, namespace, name)
}

// ServiceListerFunc adapts a function to ServiceLister.
type ServiceListerFunc func(ctx context.Context, namespace string) ([]*v1.Service, error)

// ListServices calls f.
func (f ServiceListerFunc) ListServices(ctx context.Context, namespace string) ([]*v1.Service, error) {
	return f(ctx, namespace)
}

// EventRecorder records Kubernetes events about an object. client-go's
// record.EventRecorder satisfies it.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// Config configures a Resolver. Every field is optional; a zero Config
// resolves plain values, expansion, fieldRef and resourceFieldRef, and fails
// configMap and secret references.
type Config struct {
	// ConfigMaps and Secrets serve configMapKeyRef, secretKeyRef and envFrom.
	ConfigMaps ConfigMapGetter
	Secrets    SecretGetter
	// Services provides the service-link variables (FOO_SERVICE_HOST, ...).
	// Nil means none, not even the kubernetes service's.
	Services ServiceLister
	// NodeIPs are the node's addresses, primary first, for status.hostIP and
	// status.hostIPs; the first one's family also orders the pod IPs.
	NodeIPs []string
	// NodeAllocatable stands in for a cpu, memory or ephemeral-storage limit
	// the container (and the pod) does not set, as upstream.
	NodeAllocatable v1.ResourceList
	// Events receives InvalidEnvironmentVariableNames warnings. Nil discards.
	Events EventRecorder
}

// Resolver computes the environment of a container. It holds no state
// between calls and is safe for concurrent use. The zero Resolver is usable.
type Resolver struct {
	cfg Config
}

// NewResolver returns a Resolver for cfg. It keeps cfg as given; the caller
// must not change NodeIPs or NodeAllocatable afterwards.
func NewResolver(cfg Config) *Resolver {
	return &Resolver{cfg: cfg}
}

// Envs returns the environment of container c of pod, in this order:
// service-link variables (sorted by name), envFrom sources (each source's
// keys sorted), then c.Env as declared. A later definition of a name replaces
// the earlier value and keeps its position, so each name appears once.
// $(VAR) in an env value expands against everything defined before it.
//
// podIPs are the sandbox's IPs (status.podIP, status.podIPs). Envs blocks on
// the getters and the lister. An error — a missing non-optional
// ConfigMap, Secret or key, a bad field path — carries upstream's message,
// which belongs in the CreateContainerConfigError status. The result belongs
// to the caller.
func (r *Resolver) Envs(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) ([]nodekit.EnvVar, error) {
	if pod.Spec.HostNetwork && len(podIPs) == 0 {
		// A host-network pod has the node's addresses; its sandbox reports
		// none.
		podIPs = r.cfg.NodeIPs
	}
	if pod == nil || c == nil {
		return nil, fmt.Errorf("podopts: Envs needs a pod and a container")
	}
	env := newEnvList()

	// An undefaulted pod (nil) gets the API default, true.
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	if err := r.serviceEnv(ctx, env, pod.Namespace, links); err != nil {
		return nil, err
	}

	s := &sources{r: r, ns: pod.Namespace, configMaps: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}}
	for _, from := range c.EnvFrom {
		if err := s.envFrom(ctx, pod, env, from); err != nil {
			return nil, err
		}
	}

	for _, e := range c.Env {
		val := e.Value
		if val != "" {
			val = expansion.Expand(val, env.values)
		} else if e.ValueFrom != nil {
			v, ok, err := r.valueFrom(ctx, s, pod, c, podIPs, e.ValueFrom)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue // optional and missing: the variable is not set
			}
			val = v
		}
		env.set(e.Name, val)
	}
	return env.list(), nil
}

// valueFrom resolves one env source. ok is false when an optional source is
// missing.
func (r *Resolver) valueFrom(ctx context.Context, s *sources, pod *v1.Pod, c *v1.Container, podIPs []string, from *v1.EnvVarSource) (val string, ok bool, err error) {
	switch {
	case from.FieldRef != nil:
		val, err = r.fieldRefValue(from.FieldRef, pod, podIPs)
		return val, err == nil, err
	case from.ResourceFieldRef != nil:
		val, err = r.resourceFieldRefValue(from.ResourceFieldRef, pod, c)
		return val, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		optional := ref.Optional != nil && *ref.Optional
		cm, err := s.configMap(ctx, ref.Name)
		if err != nil {
			if optional && apierrors.IsNotFound(err) {
				return "", false, nil
			}
			return "", false, err
		}
		v, found := cm.Data[ref.Key]
		if !found {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, s.ns, ref.Name)
		}
		return v, true, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		sec, err := s.secret(ctx, ref.Name)
		if err != nil {
			if optional && apierrors.IsNotFound(err) {
				return "", false, nil
			}
			return "", false, err
		}
		v, found := sec.Data[ref.Key]
		if !found {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, s.ns, ref.Name)
		}
		return string(v), true, nil
	case from.FileKeyRef != nil:
		// Needs the volume manager's host path of the volume; not wired yet.
		return "", false, fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", from.FileKeyRef.VolumeName)
	}
	return "", true, nil
}

// sources fetches each ConfigMap and Secret at most once per Envs call.
type sources struct {
	r          *Resolver
	ns         string
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
}

func (s *sources) configMap(ctx context.Context, name string) (*v1.ConfigMap, error) {
	if cm, ok := s.configMaps[name]; ok {
		return cm, nil
	}
	if s.r.cfg.ConfigMaps == nil {
		return nil, fmt.Errorf("couldn't get configMap %s/%s, no kubeClient defined", s.ns, name)
	}
	cm, err := s.r.cfg.ConfigMaps.GetConfigMap(ctx, s.ns, name)
	if err != nil {
		return nil, err
	}
	if cm == nil {
		return nil, apierrors.NewNotFound(v1.Resource("configmap"), name)
	}
	s.configMaps[name] = cm
	return cm, nil
}

func (s *sources) secret(ctx context.Context, name string) (*v1.Secret, error) {
	if sec, ok := s.secrets[name]; ok {
		return sec, nil
	}
	if s.r.cfg.Secrets == nil {
		return nil, fmt.Errorf("couldn't get secret %s/%s, no kubeClient defined", s.ns, name)
	}
	sec, err := s.r.cfg.Secrets.GetSecret(ctx, s.ns, name)
	if err != nil {
		return nil, err
	}
	if sec == nil {
		return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
	}
	s.secrets[name] = sec
	return sec, nil
}

// envFrom adds every key of one envFrom source, prefixed. Keys that are not
// valid variable names are skipped and reported.
func (s *sources) envFrom(ctx context.Context, pod *v1.Pod, env *envList, from v1.EnvFromSource) error {
	var (
		data map[string]string
		kind string
		name string
	)
	switch {
	case from.ConfigMapRef != nil:
		name, kind = from.ConfigMapRef.Name, "configMap"
		cm, err := s.configMap(ctx, name)
		if err != nil {
			if from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional && apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		data = cm.Data
	case from.SecretRef != nil:
		name, kind = from.SecretRef.Name, "secret"
		sec, err := s.secret(ctx, name)
		if err != nil {
			if from.SecretRef.Optional != nil && *from.SecretRef.Optional && apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		data = make(map[string]string, len(sec.Data))
		for k, v := range sec.Data {
			data[k] = string(v)
		}
	default:
		return nil
	}
	var invalid []string
	for _, k := range sortedKeys(data) {
		key := from.Prefix + k
		if errs := validation.IsRelaxedEnvVarName(key); len(errs) != 0 {
			invalid = append(invalid, key)
			continue
		}
		env.set(key, data[k])
	}
	if len(invalid) > 0 && s.r.cfg.Events != nil {
		s.r.cfg.Events.Eventf(pod, v1.EventTypeWarning, "InvalidEnvironmentVariableNames",
			"Keys [%s] from the EnvFrom %s %s/%s were skipped since they are considered invalid environment variable names.",
			strings.Join(invalid, ", "), kind, s.ns, name)
	}
	return nil
}

// envList is an ordered set of variables; values doubles as the expansion
// context.
type envList struct {
	names  []string
	values map[string]string
}

func newEnvList() *envList { return &envList{values: map[string]string{}} }

func (l *envList) set(name, value string) {
	if _, ok := l.values[name]; !ok {
		l.names = append(l.names, name)
	}
	l.values[name] = value
}

func (l *envList) list() []nodekit.EnvVar {
	out := make([]nodekit.EnvVar, 0, len(l.names))
	for _, n := range l.names {
		out = append(out, nodekit.EnvVar{Name: n, Value: l.values[n]})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
