// Package volumemgrtest holds deterministic fakes for testing code that
// uses package volumemgr: a Mounter that keeps its mount table in memory,
// an ObjectGetter over maps and a TokenRequester that mints fake tokens.
package volumemgrtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/volumemgr"
)

var (
	_ volumemgr.Mounter        = (*Mounter)(nil)
	_ volumemgr.ObjectGetter   = (*Objects)(nil)
	_ volumemgr.TokenRequester = (*Tokens)(nil)
)

// Mounter records mounts in memory: nothing is mounted for real, so a
// "tmpfs" is an ordinary directory. Its table starts empty. Safe for
// concurrent use.
type Mounter struct {
	mu     sync.Mutex
	table  []volumemgr.MountPoint
	calls  []string
	failOn map[string]error
}

// Mount records source on target. Bind mounts are recorded with type
// "bind". The target must exist, as for mount(2).
func (m *Mounter) Mount(_ context.Context, source, target, fstype string, options []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, fmt.Sprintf("mount %s %s %s %s", fstype, source, target, strings.Join(options, ",")))
	if err := m.failOn[target]; err != nil {
		return err
	}
	if _, err := os.Stat(target); err != nil {
		return err
	}
	typ := fstype
	if typ == "" {
		typ = "bind"
	}
	m.table = append(m.table, volumemgr.MountPoint{Path: filepath.Clean(target), Type: typ, Source: source})
	return nil
}

// Unmount removes the topmost mount on target; EINVAL-like error when there
// is none.
func (m *Mounter) Unmount(_ context.Context, target string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, "unmount "+target)
	target = filepath.Clean(target)
	for i := len(m.table) - 1; i >= 0; i-- {
		if m.table[i].Path == target {
			m.table = append(m.table[:i], m.table[i+1:]...)
			return nil
		}
	}
	return &os.PathError{Op: "unmount", Path: target, Err: fmt.Errorf("not mounted")}
}

// MountPoints returns a copy of the table.
func (m *Mounter) MountPoints(context.Context) ([]volumemgr.MountPoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]volumemgr.MountPoint(nil), m.table...), nil
}

// Add puts a mount in the table, as if an earlier run had made it.
func (m *Mounter) Add(mp volumemgr.MountPoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mp.Path = filepath.Clean(mp.Path)
	m.table = append(m.table, mp)
}

// FailMountOn makes mounts on target fail with err (nil clears it).
func (m *Mounter) FailMountOn(target string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failOn == nil {
		m.failOn = map[string]error{}
	}
	m.failOn[target] = err
}

// Below returns the mounted paths at or under dir.
func (m *Mounter) Below(dir string) []volumemgr.MountPoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir = filepath.Clean(dir)
	var out []volumemgr.MountPoint
	for _, mp := range m.table {
		if mp.Path == dir || strings.HasPrefix(mp.Path, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// Calls returns the mount and unmount calls so far, as
// "mount TYPE SOURCE TARGET OPTIONS" and "unmount TARGET".
func (m *Mounter) Calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.calls...)
}

// Objects serves ConfigMaps and Secrets from maps keyed "namespace/name",
// with the kubelet's not-found errors. Safe for concurrent use.
type Objects struct {
	mu         sync.Mutex
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
	gets       int
}

// SetConfigMap stores (or replaces) cm.
func (o *Objects) SetConfigMap(cm *v1.ConfigMap) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.configMaps == nil {
		o.configMaps = map[string]*v1.ConfigMap{}
	}
	o.configMaps[cm.Namespace+"/"+cm.Name] = cm.DeepCopy()
}

// SetSecret stores (or replaces) s.
func (o *Objects) SetSecret(s *v1.Secret) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.secrets == nil {
		o.secrets = map[string]*v1.Secret{}
	}
	o.secrets[s.Namespace+"/"+s.Name] = s.DeepCopy()
}

// DeleteConfigMap removes a ConfigMap.
func (o *Objects) DeleteConfigMap(namespace, name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.configMaps, namespace+"/"+name)
}

// GetConfigMap returns a copy of the stored ConfigMap.
func (o *Objects) GetConfigMap(_ context.Context, namespace, name string) (*v1.ConfigMap, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.gets++
	cm, ok := o.configMaps[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(v1.Resource("configmap"), name)
	}
	return cm.DeepCopy(), nil
}

// GetSecret returns a copy of the stored Secret.
func (o *Objects) GetSecret(_ context.Context, namespace, name string) (*v1.Secret, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.gets++
	s, ok := o.secrets[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
	}
	return s.DeepCopy(), nil
}

// Gets counts the Get calls.
func (o *Objects) Gets() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.gets
}

// Tokens mints tokens "token-N" (N counts requests from 1) that expire
// ExpirationSeconds after Clock's now. Err, when set, fails requests.
type Tokens struct {
	Clock clock.PassiveClock

	mu       sync.Mutex
	requests []TokenCall
	err      error
}

// TokenCall is one CreateToken call.
type TokenCall struct {
	Namespace, ServiceAccount string
	Request                   *authenticationv1.TokenRequest
	At                        time.Time
}

// CreateToken records the call and returns a new token.
func (t *Tokens) CreateToken(_ context.Context, namespace, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.Clock.Now()
	t.requests = append(t.requests, TokenCall{Namespace: namespace, ServiceAccount: sa, Request: req.DeepCopy(), At: now})
	if t.err != nil {
		return nil, t.err
	}
	exp := int64(3600)
	if req.Spec.ExpirationSeconds != nil {
		exp = *req.Spec.ExpirationSeconds
	}
	out := req.DeepCopy()
	out.Spec.ExpirationSeconds = &exp
	out.Status = authenticationv1.TokenRequestStatus{
		Token:               fmt.Sprintf("token-%d", len(t.requests)),
		ExpirationTimestamp: metav1.NewTime(now.Add(time.Duration(exp) * time.Second)),
	}
	return out, nil
}

// Fail makes later requests fail with err (nil to succeed again).
func (t *Tokens) Fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.err = err
}

// Calls returns the requests so far.
func (t *Tokens) Calls() []TokenCall {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]TokenCall(nil), t.requests...)
}
