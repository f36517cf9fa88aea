package volumemgr

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/nodekit/nodekit/internal/downward"
)

// The content plugins (configMap, secret, downwardAPI, projected) write
// their files with writeAtomic and are refreshed while mounted. As upstream,
// configMap volumes live on disk and the others on a tmpfs of their own, so
// secrets and tokens never touch the disk; all are mounted read-only.

// defaultFileMode is the API default for defaultMode (0644).
const defaultFileMode int32 = 0o644

// errNoObjects is returned when a volume needs the API server and the agent
// has none (standalone).
var errNoObjects = errors.New("no API client: ConfigMaps and Secrets cannot be read")

func modeOr(m *int32) int32 {
	if m == nil {
		return defaultFileMode
	}
	return *m
}

// writeContent puts payload in req.Dir: on a tmpfs of the volume's own
// when memory is set (sized as a memory-backed emptyDir without sizeLimit),
// else on disk.
func (h *host) writeContent(ctx context.Context, req *SetUpRequest, memory bool, payload map[string]fileProjection) (*SetUpResult, error) {
	if memory {
		if err := ensureTmpfs(ctx, h.mounter, req.Dir, memoryVolumeSize(req.Pod, nil, h.allocatable)); err != nil {
			return nil, err
		}
	} else if err := makeVolumeDir(req.Dir, nil); err != nil {
		return nil, err
	}
	if err := makeNestedMountpoints(req.Pod, req.Volume.Name, req.Dir); err != nil {
		return nil, err
	}
	perms := func() error { return applyFSGroup(req.Dir, req.Pod, true) }
	if err := writeAtomic(req.Dir, payload, h.clock.Now(), perms); err != nil {
		return nil, fmt.Errorf("write volume %q: %w", req.Volume.Name, err)
	}
	return &SetUpResult{ReadOnly: true, Refresh: true, SELinuxRelabel: true}, nil
}

func (h *host) configMap(ctx context.Context, ns, name string, optional bool) (*v1.ConfigMap, error) {
	if h.objects == nil {
		return nil, errNoObjects
	}
	cm, err := h.objects.GetConfigMap(ctx, ns, name)
	if err != nil {
		if optional && apierrors.IsNotFound(err) {
			return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, nil
		}
		return nil, err
	}
	return cm, nil
}

func (h *host) secret(ctx context.Context, ns, name string, optional bool) (*v1.Secret, error) {
	if h.objects == nil {
		return nil, errNoObjects
	}
	s, err := h.objects.GetSecret(ctx, ns, name)
	if err != nil {
		if optional && apierrors.IsNotFound(err) {
			return &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, nil
		}
		return nil, err
	}
	return s, nil
}

// configMapPayload maps a ConfigMap to files: every key (data and
// binaryData) with defaultMode, or only items. A missing item key is an
// error unless optional.
func configMapPayload(items []v1.KeyToPath, cm *v1.ConfigMap, defaultMode *int32, optional bool) (map[string]fileProjection, error) {
	out := map[string]fileProjection{}
	if len(items) == 0 {
		for k, v := range cm.Data {
			out[k] = fileProjection{Data: []byte(v), Mode: modeOr(defaultMode)}
		}
		for k, v := range cm.BinaryData {
			out[k] = fileProjection{Data: v, Mode: modeOr(defaultMode)}
		}
		return out, nil
	}
	for _, it := range items {
		var data []byte
		if s, ok := cm.Data[it.Key]; ok {
			data = []byte(s)
		} else if b, ok := cm.BinaryData[it.Key]; ok {
			data = b
		} else if optional {
			continue
		} else {
			return nil, fmt.Errorf("configmap references non-existent config key: %s", it.Key)
		}
		out[it.Path] = fileProjection{Data: data, Mode: itemMode(it.Mode, defaultMode)}
	}
	return out, nil
}

// secretPayload is configMapPayload for a Secret.
func secretPayload(items []v1.KeyToPath, s *v1.Secret, defaultMode *int32, optional bool) (map[string]fileProjection, error) {
	out := map[string]fileProjection{}
	if len(items) == 0 {
		for k, v := range s.Data {
			out[k] = fileProjection{Data: v, Mode: modeOr(defaultMode)}
		}
		return out, nil
	}
	for _, it := range items {
		data, ok := s.Data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("references non-existent secret key: %s", it.Key)
		}
		out[it.Path] = fileProjection{Data: data, Mode: itemMode(it.Mode, defaultMode)}
	}
	return out, nil
}

func itemMode(m, defaultMode *int32) int32 {
	if m != nil {
		return *m
	}
	return modeOr(defaultMode)
}

// configMapPlugin shows a ConfigMap's keys as files, on disk.
type configMapPlugin struct{ h *host }

func (*configMapPlugin) Name() string                   { return ConfigMapPluginName }
func (*configMapPlugin) CanSupport(vol *v1.Volume) bool { return vol.ConfigMap != nil }

func (p *configMapPlugin) SetUp(ctx context.Context, req *SetUpRequest) (*SetUpResult, error) {
	src := req.Volume.ConfigMap
	optional := src.Optional != nil && *src.Optional
	cm, err := p.h.configMap(ctx, req.Pod.Namespace, src.Name, optional)
	if err != nil {
		return nil, err
	}
	payload, err := configMapPayload(src.Items, cm, src.DefaultMode, optional)
	if err != nil {
		return nil, err
	}
	return p.h.writeContent(ctx, req, false, payload)
}

func (p *configMapPlugin) TearDown(ctx context.Context, req *TearDownRequest) error {
	return tearDownDir(ctx, p.h.mounter, req.Dir)
}

// secretPlugin shows a Secret's keys as files, on tmpfs.
type secretPlugin struct{ h *host }

func (*secretPlugin) Name() string                   { return SecretPluginName }
func (*secretPlugin) CanSupport(vol *v1.Volume) bool { return vol.Secret != nil }

func (p *secretPlugin) SetUp(ctx context.Context, req *SetUpRequest) (*SetUpResult, error) {
	src := req.Volume.Secret
	optional := src.Optional != nil && *src.Optional
	s, err := p.h.secret(ctx, req.Pod.Namespace, src.SecretName, optional)
	if err != nil {
		return nil, err
	}
	payload, err := secretPayload(src.Items, s, src.DefaultMode, optional)
	if err != nil {
		return nil, err
	}
	return p.h.writeContent(ctx, req, true, payload)
}

func (p *secretPlugin) TearDown(ctx context.Context, req *TearDownRequest) error {
	return tearDownDir(ctx, p.h.mounter, req.Dir)
}

// downwardAPIPlugin shows pod fields and container resources as files, on
// tmpfs.
type downwardAPIPlugin struct{ h *host }

func (*downwardAPIPlugin) Name() string                   { return DownwardAPIPluginName }
func (*downwardAPIPlugin) CanSupport(vol *v1.Volume) bool { return vol.DownwardAPI != nil }

func (p *downwardAPIPlugin) SetUp(ctx context.Context, req *SetUpRequest) (*SetUpResult, error) {
	src := req.Volume.DownwardAPI
	payload, err := downwardAPIPayload(src.Items, req.Pod, p.h.allocatable, src.DefaultMode)
	if err != nil {
		return nil, err
	}
	return p.h.writeContent(ctx, req, true, payload)
}

func (p *downwardAPIPlugin) TearDown(ctx context.Context, req *TearDownRequest) error {
	return tearDownDir(ctx, p.h.mounter, req.Dir)
}

// downwardAPIPayload renders the items; every failing item is reported
// (aggregated, as upstream).
func downwardAPIPayload(items []v1.DownwardAPIVolumeFile, pod *v1.Pod, alloc v1.ResourceList, defaultMode *int32) (map[string]fileProjection, error) {
	out := map[string]fileProjection{}
	var errs []error
	for _, it := range items {
		f := fileProjection{Mode: itemMode(it.Mode, defaultMode)}
		switch {
		case it.FieldRef != nil:
			s, err := podFieldValue(pod, it.FieldRef.FieldPath)
			if err != nil {
				errs = append(errs, err)
			}
			f.Data = []byte(s)
		case it.ResourceFieldRef != nil:
			s, err := containerResourceValue(it.ResourceFieldRef, pod, alloc)
			if err != nil {
				errs = append(errs, err)
			}
			f.Data = []byte(s)
		}
		out[filepath.Clean(it.Path)] = f
	}
	return out, utilerrors.NewAggregate(errs)
}

// podFieldValue renders the metadata fields a downwardAPI volume may show.
func podFieldValue(pod *v1.Pod, path string) (string, error) {
	if v, ok, err := downward.MetadataValue(pod, path); ok {
		return v, err
	}
	return "", fmt.Errorf("unsupported fieldPath: %v", path)
}

// containerResourceValue renders a container's limit or request divided by
// the divisor, rounded up; a cpu, memory or ephemeral-storage limit the
// container does not set is the node's allocatable.
func containerResourceValue(fs *v1.ResourceFieldSelector, pod *v1.Pod, alloc v1.ResourceList) (string, error) {
	c := findContainer(pod, fs.ContainerName)
	if c == nil {
		return "", fmt.Errorf("container %s not found", fs.ContainerName)
	}
	limits := v1.ResourceList{}
	for k, v := range c.Resources.Limits {
		limits[k] = v
	}
	for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		if q, ok := limits[r]; !ok || q.IsZero() {
			if a, ok := alloc[r]; ok {
				limits[r] = a.DeepCopy()
			}
		}
	}
	divisor := fs.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	kind, name, _ := strings.Cut(fs.Resource, ".")
	list := limits
	switch kind {
	case "limits":
	case "requests":
		list = c.Resources.Requests
	default:
		return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
	}
	q := list[v1.ResourceName(name)]
	switch {
	case name == string(v1.ResourceCPU):
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	case name == string(v1.ResourceMemory), name == string(v1.ResourceEphemeralStorage),
		strings.HasPrefix(name, v1.ResourceHugePagesPrefix):
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
	}
	return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

// projectedPlugin joins configMap, secret, downwardAPI and service-account
// token sources in one directory, on tmpfs.
type projectedPlugin struct{ h *host }

func (*projectedPlugin) Name() string                   { return ProjectedPluginName }
func (*projectedPlugin) CanSupport(vol *v1.Volume) bool { return vol.Projected != nil }

func (p *projectedPlugin) SetUp(ctx context.Context, req *SetUpRequest) (*SetUpResult, error) {
	payload, refreshBy, err := p.collect(ctx, req.Pod, req.Volume.Projected)
	if err != nil {
		return nil, err
	}
	res, err := p.h.writeContent(ctx, req, true, payload)
	if err != nil {
		return nil, err
	}
	res.RefreshBy = refreshBy
	return res, nil
}

func (p *projectedPlugin) TearDown(ctx context.Context, req *TearDownRequest) error {
	err := tearDownDir(ctx, p.h.mounter, req.Dir)
	if err == nil && p.h.tokens != nil {
		p.h.tokens.forgetPod(req.PodUID)
	}
	return err
}

// collect gathers every source's files; later sources win on equal paths.
// It returns when the earliest token needs refreshing.
func (p *projectedPlugin) collect(ctx context.Context, pod *v1.Pod, src *v1.ProjectedVolumeSource) (map[string]fileProjection, time.Time, error) {
	out := map[string]fileProjection{}
	var refreshBy time.Time
	var errs []error
	merge := func(m map[string]fileProjection) {
		for k, v := range m {
			out[k] = v
		}
	}
	for _, s := range src.Sources {
		switch {
		case s.ConfigMap != nil:
			optional := s.ConfigMap.Optional != nil && *s.ConfigMap.Optional
			cm, err := p.h.configMap(ctx, pod.Namespace, s.ConfigMap.Name, optional)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			m, err := configMapPayload(s.ConfigMap.Items, cm, src.DefaultMode, optional)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			merge(m)
		case s.Secret != nil:
			optional := s.Secret.Optional != nil && *s.Secret.Optional
			sec, err := p.h.secret(ctx, pod.Namespace, s.Secret.Name, optional)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			m, err := secretPayload(s.Secret.Items, sec, src.DefaultMode, optional)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			merge(m)
		case s.DownwardAPI != nil:
			m, err := downwardAPIPayload(s.DownwardAPI.Items, pod, p.h.allocatable, src.DefaultMode)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			merge(m)
		case s.ServiceAccountToken != nil:
			f, by, err := p.token(ctx, pod, s.ServiceAccountToken, src.DefaultMode)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out[s.ServiceAccountToken.Path] = f
			if refreshBy.IsZero() || by.Before(refreshBy) {
				refreshBy = by
			}
		case s.ClusterTrustBundle != nil:
			errs = append(errs, errors.New("clusterTrustBundle projections are not supported by this node agent"))
		case s.PodCertificate != nil:
			errs = append(errs, errors.New("podCertificate projections are not supported by this node agent"))
		}
	}
	return out, refreshBy, utilerrors.NewAggregate(errs)
}

// token requests (or reuses) the pod's service-account token. As upstream,
// the file is 0600 when it gets an owner: the containers' common user, or
// the fsGroup (whose ownership change then adds group read).
func (p *projectedPlugin) token(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, defaultMode *int32) (fileProjection, time.Time, error) {
	if p.h.tokens == nil {
		return fileProjection{}, time.Time{}, errors.New("cannot request a service account token: the agent has no API client")
	}
	var audiences []string
	if src.Audience != "" {
		audiences = []string{src.Audience}
	}
	exp := src.ExpirationSeconds
	if exp == nil {
		d := int64(3600)
		exp = &d
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, refreshBy, err := p.h.tokens.get(ctx, pod.Namespace, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         audiences,
			ExpirationSeconds: exp,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
		},
	})
	if err != nil {
		return fileProjection{}, time.Time{}, err
	}
	user := fsUserOf(pod)
	mode := modeOr(defaultMode)
	if user != nil || fsGroupOf(pod) != nil {
		mode = 0o600
	}
	return fileProjection{Data: []byte(tr.Status.Token), Mode: mode, FsUser: user}, refreshBy, nil
}
