package podopts

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// fakeStore serves ConfigMaps, Secrets and Services from maps keyed
// "namespace/name" (services by namespace) and counts the calls.
type fakeStore struct {
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
	services   map[string][]*v1.Service
	calls      map[string]int
	err        error // returned by every call when set
}

var (
	_ ConfigMapGetter = (*fakeStore)(nil)
	_ SecretGetter    = (*fakeStore)(nil)
	_ ServiceLister   = (*fakeStore)(nil)
)

func (f *fakeStore) count(key string) {
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[key]++
}

func (f *fakeStore) GetConfigMap(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
	f.count("configmap/" + ns + "/" + name)
	if f.err != nil {
		return nil, f.err
	}
	if cm, ok := f.configMaps[ns+"/"+name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("configmap"), name)
}

func (f *fakeStore) GetSecret(_ context.Context, ns, name string) (*v1.Secret, error) {
	f.count("secret/" + ns + "/" + name)
	if f.err != nil {
		return nil, f.err
	}
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
}

func (f *fakeStore) ListServices(_ context.Context, ns string) ([]*v1.Service, error) {
	f.count("services/" + ns)
	if f.err != nil {
		return nil, f.err
	}
	return f.services[ns], nil
}

func configMap(ns, name string, data map[string]string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func secret(ns, name string, data map[string]string) *v1.Secret {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func service(ns, name, ip string, ports ...v1.ServicePort) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1.ServiceSpec{ClusterIP: ip, Ports: ports},
	}
}

// fakeEvents records events as "type reason message".
type fakeEvents struct {
	events []string
}

var _ EventRecorder = (*fakeEvents)(nil)

func (f *fakeEvents) Eventf(_ runtime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	f.events = append(f.events, eventtype+" "+reason+" "+fmt.Sprintf(messageFmt, args...))
}

func ptr[T any](v T) *T { return &v }
