package agenttest

import (
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SeedNamespace does for a namespace what kube-controller-manager would,
// since the test control plane runs none: it creates the "default"
// ServiceAccount (without it pods cannot be created) and the
// kube-root-ca.crt ConfigMap (without it the kube-api-access volume every
// pod gets cannot be mounted). The namespace must exist ("default" always
// does). Idempotent.
func (c *ControlPlane) SeedNamespace(t testing.TB, namespace string) {
	t.Helper()
	ctx := t.Context()
	client := c.AdminClient()
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: namespace}}
	if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("agenttest: create ServiceAccount %s/default: %v", namespace, err)
	}
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		t.Fatalf("agenttest: read the cluster CA: %v", err)
	}
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: namespace}, Data: map[string]string{"ca.crt": string(ca)}}
	if _, err := client.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("agenttest: create ConfigMap %s/kube-root-ca.crt: %v", namespace, err)
	}
}
