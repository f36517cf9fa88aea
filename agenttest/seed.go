package agenttest

import (
	"testing"
)

// SeedNamespace does for a namespace what kube-controller-manager would,
// since the test control plane runs none: it creates the "default"
// ServiceAccount (without it pods cannot be created) and the
// kube-root-ca.crt ConfigMap (without it the kube-api-access volume every
// pod gets cannot be mounted). The namespace must exist ("default" always
// does). Idempotent.
func (c *ControlPlane) SeedNamespace(t testing.TB, namespace string) {
	t.Helper()
	if err := c.cp.SeedNamespace(t.Context(), c.AdminClient(), namespace); err != nil {
		t.Fatalf("agenttest: %v", err)
	}
}
