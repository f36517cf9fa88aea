package agenttest_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/agenttest"
)

func TestControlPlane(t *testing.T) {
	cp := agenttest.StartControlPlane(t, agenttest.WithNodes("n1"))
	admin := cp.AdminClient()

	body, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(t.Context())
	if err != nil || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("/readyz = %q, %v; want ok", body, err)
	}
	t.Logf("kube-apiserver answering /readyz at %s", cp.URL)

	v, err := admin.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if v.GitVersion != "v1.37.2" {
		t.Errorf("server version = %s, want v1.37.2", v.GitVersion)
	}

	// The node client is a kubelet to the Node authorizer and NodeRestriction:
	// it may register its own Node, and no other.
	node := kubernetes.NewForConfigOrDie(cp.NodeConfig("n1")).CoreV1().Nodes()
	if _, err := node.Create(t.Context(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node n1 creating its own Node: %v", err)
	}
	_, err = node.Create(t.Context(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("node n1 creating Node other: err = %v, want 403 Forbidden", err)
	}
	t.Logf("node n1 creating Node other: %v", err)
	if _, err := admin.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{}); err != nil {
		t.Errorf("admin reading Node n1: %v", err)
	}
}

func TestRequireIntegrationControlPlaneBinDir(t *testing.T) {
	// An empty bin dir: without $NODEKIT_REQUIRE_INTEGRATION the test skips.
	t.Setenv(agenttest.RequireIntegrationEnv, "")
	skipped := false
	t.Run("missing", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		agenttest.StartControlPlane(t, agenttest.WithBinDir(t.TempDir()))
		t.Error("StartControlPlane with an empty bin dir returned")
	})
	if !skipped {
		t.Error("StartControlPlane with an empty bin dir did not skip")
	}
}
