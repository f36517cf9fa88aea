package localcp

import (
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The API server stops and starts again on its port; etcd and so the
// cluster's objects survive.
func TestControlPlaneRestartAPIServer(t *testing.T) {
	requireBinaries(t)
	cp, err := Start(t.Context(), Config{Dir: t.TempDir(), Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop(stopCtx(t)) })
	if err := cp.StartAPIServer(t.Context()); err != nil {
		t.Fatalf("StartAPIServer on a running API server: %v", err)
	}
	cs := kubernetes.NewForConfigOrDie(cp.Admin)
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	url, etcd := cp.URL, cp.etcd.pid

	if err := cp.StopAPIServer(t.Context()); err != nil {
		t.Fatalf("StopAPIServer: %v", err)
	}
	if err := cp.StopAPIServer(t.Context()); err != nil {
		t.Fatalf("StopAPIServer twice: %v", err)
	}
	if err := cp.Ready(t.Context()); err == nil {
		t.Fatal("Ready succeeded with the API server stopped")
	}
	if live, _ := LiveProcesses(cp.Dir); len(live) != 1 || live[0].Name != ProcEtcd || live[0].PID != etcd {
		t.Fatalf("live processes while the API server is stopped: %v, want etcd (pid %d) alone", live, etcd)
	}

	// A change made meanwhile, straight in etcd.
	if n, err := cp.EtcdDelete(t.Context(), "/registry/configmaps/default/gone"); err != nil || n != 0 {
		t.Fatalf("EtcdDelete of a missing key: %d, %v", n, err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(t.Context(), nil, metav1.CreateOptions{}); err == nil {
		t.Fatal("create with the API server stopped succeeded")
	}
	if err := cp.StartAPIServer(t.Context()); err != nil {
		t.Fatalf("StartAPIServer: %v", err)
	}
	if cp.URL != url {
		t.Fatalf("URL changed from %s to %s", url, cp.URL)
	}
	got, err := cs.CoreV1().ConfigMaps("default").Get(t.Context(), "survivor", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("ConfigMap after the restart: %v, %v", got, err)
	}
	// Deleted behind the API server's back while it was stopped.
	doomed := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "doomed", Namespace: "default"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(t.Context(), doomed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cp.StopAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, err := cp.EtcdDelete(t.Context(), "/registry/configmaps/default/doomed"); err != nil || n != 1 {
		t.Fatalf("EtcdDelete: %d, %v", n, err)
	}
	if err := cp.StartAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(t.Context(), "doomed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("ConfigMap deleted in etcd: err = %v, want NotFound", err)
	}
	log, err := os.ReadFile(LogPath(cp.Dir, ProcAPIServer))
	if err != nil {
		t.Fatal(err)
	}
	if n := countLines(string(log), "# "); n < 2 {
		t.Errorf("API server log has %d start headers, want the first run's kept (2)", n)
	}
}

func countLines(s, prefix string) int {
	n := 0
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, prefix) {
			n++
		}
	}
	return n
}
