package podconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// CheckpointObjects serves ConfigMaps, Secrets, Services, service account
// tokens and the Node to whatever reads them (environment, volumes, image
// pull secrets, admission): from the live readers of CheckpointConfig while they answer,
// keeping what they return for the checkpoint, and from the checkpoint
// while the API server cannot be reached (a transport error, a timeout
// after CheckpointConfig.ReadTimeout, or a 5xx/429 answer). Any other answer
// of the API server is passed on as it is: a NotFound also drops the
// checkpointed copy, a Forbidden is never papered over. Safe for concurrent
// use; returned objects belong to the caller.
type CheckpointObjects struct {
	s *CheckpointSource
}

var (
	_ ConfigMapGetter = (*CheckpointObjects)(nil)
	_ SecretGetter    = (*CheckpointObjects)(nil)
	_ ServiceLister   = (*CheckpointObjects)(nil)
	_ NodeGetter      = (*CheckpointObjects)(nil)
	_ TokenRequester  = (*CheckpointObjects)(nil)
)

// Objects returns the source's getters. Before Run has read the file they
// serve only what they have read live.
func (s *CheckpointSource) Objects() *CheckpointObjects { return &CheckpointObjects{s: s} }

// GetConfigMap reads the ConfigMap live, or serves the checkpointed copy
// while the API server cannot be reached. It blocks on the live read for
// at most CheckpointConfig.ReadTimeout.
func (o *CheckpointObjects) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	s := o.s
	if s.cfg.ConfigMaps == nil {
		return nil, fmt.Errorf("podconfig: checkpoint: no ConfigMap reader to get configmap %s/%s", namespace, name)
	}
	return readThrough(ctx, s, "ConfigMap", objectKey(namespace, name), s.configMaps, (*v1.ConfigMap).DeepCopy,
		func(ctx context.Context) (*v1.ConfigMap, error) {
			return s.cfg.ConfigMaps.GetConfigMap(ctx, namespace, name)
		})
}

// GetSecret is GetConfigMap for Secrets.
func (o *CheckpointObjects) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	s := o.s
	if s.cfg.Secrets == nil {
		return nil, fmt.Errorf("podconfig: checkpoint: no Secret reader to get secret %s/%s", namespace, name)
	}
	return readThrough(ctx, s, "Secret", objectKey(namespace, name), s.secrets, (*v1.Secret).DeepCopy,
		func(ctx context.Context) (*v1.Secret, error) { return s.cfg.Secrets.GetSecret(ctx, namespace, name) })
}

// ListServices lists the namespace's Services live, or serves the
// checkpointed list while the API server cannot be reached.
func (o *CheckpointObjects) ListServices(ctx context.Context, namespace string) ([]*v1.Service, error) {
	s := o.s
	if s.cfg.Services == nil {
		return nil, fmt.Errorf("podconfig: checkpoint: no Service lister to list services of %s", namespace)
	}
	lctx, cancel := context.WithTimeout(ctx, s.cfg.ReadTimeout)
	list, err := s.cfg.Services.ListServices(lctx, namespace)
	cancel()
	if err == nil {
		stored := make([]*v1.Service, 0, len(list))
		for _, svc := range list {
			if svc != nil {
				c := svc.DeepCopy()
				c.ManagedFields = nil
				stored = append(stored, c)
			}
		}
		s.mu.Lock()
		s.services[namespace] = stored
		s.mu.Unlock()
		return list, nil
	}
	if !unreachable(ctx, err) {
		return nil, err
	}
	s.mu.Lock()
	stored, ok := s.services[namespace]
	out := make([]*v1.Service, len(stored))
	for i, svc := range stored {
		out[i] = svc.DeepCopy()
	}
	s.mu.Unlock()
	if !ok {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("API server unreachable; serving Services from the pod checkpoint", "namespace", namespace, "err", err.Error())
	return out, nil
}

// Node returns the Node from CheckpointConfig.Node, or the checkpointed
// copy when that fails for any reason (an informer's cache is empty until
// the API server answers).
func (o *CheckpointObjects) Node(ctx context.Context) (*v1.Node, error) {
	s := o.s
	if s.cfg.Node == nil {
		return nil, errors.New("podconfig: checkpoint: no Node getter")
	}
	n, err := s.cfg.Node.Node(ctx)
	if err == nil && n != nil {
		s.mu.Lock()
		if s.node == nil || s.node.ResourceVersion != n.ResourceVersion {
			c := n.DeepCopy()
			c.ManagedFields = nil
			s.node = c
		}
		s.mu.Unlock()
		return n, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.node == nil {
		if err == nil {
			err = errors.New("podconfig: checkpoint: the Node getter returned no node")
		}
		return nil, err
	}
	return s.node.DeepCopy(), nil
}

// CreateToken asks CheckpointConfig.Tokens for a service account token and
// keeps it; while the API server cannot be reached it returns the token
// last returned for the same request (same service account, audiences,
// lifetime and bound object), even an expired one: a pod restarted offline
// gets its projected volume, and the volume manager replaces the token once
// the API server answers. It blocks for at most ReadTimeout.
func (o *CheckpointObjects) CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	s := o.s
	if s.cfg.Tokens == nil {
		return nil, fmt.Errorf("podconfig: checkpoint: no token requester for service account %s/%s", namespace, serviceAccount)
	}
	key := tokenKey(namespace, serviceAccount, req)
	lctx, cancel := context.WithTimeout(ctx, s.cfg.ReadTimeout)
	tr, err := s.cfg.Tokens.CreateToken(lctx, namespace, serviceAccount, req.DeepCopy())
	cancel()
	if err == nil && tr != nil {
		c := tr.DeepCopy()
		c.Spec = *req.Spec.DeepCopy() // the key: the request as made
		s.mu.Lock()
		s.tokens[key] = &CheckpointToken{Namespace: namespace, ServiceAccount: serviceAccount, Token: c}
		live := s.live
		s.mu.Unlock()
		if live {
			s.wake()
		}
		return tr, nil
	}
	if err == nil || !unreachable(ctx, err) {
		return tr, err
	}
	s.mu.Lock()
	t, ok := s.tokens[key]
	var out *authenticationv1.TokenRequest
	if ok {
		out = t.Token.DeepCopy()
	}
	s.mu.Unlock()
	if !ok {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("API server unreachable; serving a service account token from the pod checkpoint",
		"namespace", namespace, "serviceAccount", serviceAccount, "expires", out.Status.ExpirationTimestamp, "err", err.Error())
	return out, nil
}

// tokenKey identifies a token request by everything that shapes the token.
func tokenKey(namespace, serviceAccount string, tr *authenticationv1.TokenRequest) string {
	spec, _ := json.Marshal(tr.Spec) // plain data: never fails
	return namespace + "/" + serviceAccount + "/" + string(spec)
}

// readThrough reads an object live and stores a copy, or serves the stored
// copy when the API server cannot be reached.
func readThrough[T metav1.Object](ctx context.Context, s *CheckpointSource, kind, key string, store map[string]T, deepCopy func(T) T, live func(context.Context) (T, error)) (T, error) {
	var zero T
	lctx, cancel := context.WithTimeout(ctx, s.cfg.ReadTimeout)
	obj, err := live(lctx)
	cancel()
	switch {
	case err == nil:
		c := deepCopy(obj)
		c.SetManagedFields(nil)
		s.mu.Lock()
		old, had := store[key]
		store[key] = c
		live := s.live
		s.mu.Unlock()
		if live && (!had || old.GetResourceVersion() != c.GetResourceVersion()) {
			s.wake()
		}
		return obj, nil
	case apierrors.IsNotFound(err):
		s.mu.Lock()
		_, had := store[key]
		delete(store, key)
		s.mu.Unlock()
		if had {
			s.wake()
		}
		return zero, err
	case !unreachable(ctx, err):
		return zero, err
	}
	s.mu.Lock()
	stored, ok := store[key]
	if ok {
		stored = deepCopy(stored)
	}
	s.mu.Unlock()
	if !ok {
		return zero, err
	}
	klog.FromContext(ctx).V(2).Info("API server unreachable; serving the object from the pod checkpoint", "kind", kind, "object", key, "err", err.Error())
	return stored, nil
}

// wake asks the writer to write the checkpoint soon.
func (s *CheckpointSource) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// unreachable reports whether err means the API server could not be asked
// (as opposed to an answer), while the caller still waits.
func unreachable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // a transport error, or the read timed out
	}
	return apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}

func objectKey(namespace, name string) string { return namespace + "/" + name }

func splitKey(key string) (namespace, name string) {
	namespace, name, _ = strings.Cut(key, "/")
	return namespace, name
}

// podObjectRefs adds the namespace/name of every ConfigMap and Secret pod
// refers to: environment (env and envFrom of every container), volumes
// (configMap, secret, projected sources and the secret references of CSI
// and in-tree volume sources) and image pull secrets.
func podObjectRefs(pod *v1.Pod, configMaps, secrets map[string]bool) {
	r := objectRefs{ns: pod.Namespace, configMaps: configMaps, secrets: secrets}
	for _, c := range pod.Spec.InitContainers {
		r.env(c.Env, c.EnvFrom)
	}
	for _, c := range pod.Spec.Containers {
		r.env(c.Env, c.EnvFrom)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		r.env(c.Env, c.EnvFrom)
	}
	for _, ref := range pod.Spec.ImagePullSecrets {
		r.secret(ref.Name)
	}
	for _, vol := range pod.Spec.Volumes {
		r.volume(&vol.VolumeSource)
	}
}

// objectRefs gathers, for podObjectRefs, the keys of the ConfigMaps and
// Secrets named in one pod's namespace; an empty name is no reference.
type objectRefs struct {
	ns                  string
	configMaps, secrets map[string]bool
}

func (r objectRefs) configMap(name string) {
	if name != "" {
		r.configMaps[objectKey(r.ns, name)] = true
	}
}

func (r objectRefs) secret(name string) {
	if name != "" {
		r.secrets[objectKey(r.ns, name)] = true
	}
}

func (r objectRefs) secretRef(ref *v1.LocalObjectReference) {
	if ref != nil {
		r.secret(ref.Name)
	}
}

// env adds what one container's env (valueFrom key references) and envFrom
// name.
func (r objectRefs) env(envs []v1.EnvVar, from []v1.EnvFromSource) {
	for _, e := range envs {
		if e.ValueFrom == nil {
			continue
		}
		if k := e.ValueFrom.ConfigMapKeyRef; k != nil {
			r.configMap(k.Name)
		}
		if k := e.ValueFrom.SecretKeyRef; k != nil {
			r.secret(k.Name)
		}
	}
	for _, f := range from {
		if f.ConfigMapRef != nil {
			r.configMap(f.ConfigMapRef.Name)
		}
		if f.SecretRef != nil {
			r.secret(f.SecretRef.Name)
		}
	}
}

// volume adds what one volume names: a configMap or secret volume, the
// sources of a projected one, or the secret reference of a CSI or in-tree
// volume.
func (r objectRefs) volume(v *v1.VolumeSource) {
	switch {
	case v.ConfigMap != nil:
		r.configMap(v.ConfigMap.Name)
	case v.Secret != nil:
		r.secret(v.Secret.SecretName)
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			if src.ConfigMap != nil {
				r.configMap(src.ConfigMap.Name)
			}
			if src.Secret != nil {
				r.secret(src.Secret.Name)
			}
		}
	case v.CSI != nil:
		r.secretRef(v.CSI.NodePublishSecretRef)
	case v.FlexVolume != nil:
		r.secretRef(v.FlexVolume.SecretRef)
	case v.CephFS != nil:
		r.secretRef(v.CephFS.SecretRef)
	case v.RBD != nil:
		r.secretRef(v.RBD.SecretRef)
	case v.ISCSI != nil:
		r.secretRef(v.ISCSI.SecretRef)
	case v.Cinder != nil:
		r.secretRef(v.Cinder.SecretRef)
	case v.ScaleIO != nil:
		r.secretRef(v.ScaleIO.SecretRef)
	case v.StorageOS != nil:
		if v.StorageOS.SecretRef != nil {
			r.secret(v.StorageOS.SecretRef.Name)
		}
	case v.AzureFile != nil:
		r.secret(v.AzureFile.SecretName)
	}
}
