package localcp

import (
	"context"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// AdminClient is a clientset of the admin user limited to qps requests a
// second with bursts of burst.
func (c *ControlPlane) AdminClient(qps float32, burst int) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(c.Admin)
	cfg.QPS, cfg.Burst = qps, burst
	return kubernetes.NewForConfig(cfg)
}

// SeedNamespace creates in namespace what kube-controller-manager would,
// for a control plane that runs none: the "default" ServiceAccount
// (without it no pod can be created) and the kube-root-ca.crt ConfigMap
// holding the cluster CA (without it the kube-api-access volume every pod
// gets cannot be mounted). The namespace must exist; objects already there
// are kept.
func (c *ControlPlane) SeedNamespace(ctx context.Context, client kubernetes.Interface, namespace string) error {
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: namespace}}
	if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/default: %w", namespace, err)
	}
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return fmt.Errorf("read the cluster CA: %w", err)
	}
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: namespace}, Data: map[string]string{"ca.crt": string(ca)}}
	if _, err := client.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ConfigMap %s/kube-root-ca.crt: %w", namespace, err)
	}
	return nil
}
