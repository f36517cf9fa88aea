package localcp

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodekit/nodekit/internal/itest"
)

// requireBinaries skips (or, with NODEKIT_REQUIRE_INTEGRATION set, fails)
// when etcd or kube-apiserver is not installed. agenttest.RequireIntegration
// does the same for other packages; this package sits below agenttest.
func requireBinaries(t *testing.T) {
	t.Helper()
	itest.Short(t, "the control plane")
	_, err := FindBinaries("")
	var missing *MissingBinaryError
	switch {
	case err == nil:
	case errors.As(err, &missing):
		itest.Require(t, "control plane binaries", err)
	default:
		t.Fatalf("control plane binaries: %v", err)
	}
}

func stopCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestControlPlaneStartStop(t *testing.T) {
	requireBinaries(t)
	dir := t.TempDir()
	cp, err := Start(t.Context(), Config{Dir: dir, NodeNames: []string{"n1"}, Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop(stopCtx(t)) })

	if err := cp.Ready(t.Context()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	cs := kubernetes.NewForConfigOrDie(cp.Admin)
	crb, err := cs.RbacV1().ClusterRoleBindings().Get(t.Context(), KubeletClientBinding, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("kubelet-client binding: %v", err)
	}
	if crb.RoleRef.Name != "system:kubelet-api-admin" || crb.Subjects[0].Name != KubeletClientUser {
		t.Errorf("kubelet-client binding = %+v", crb)
	}
	if _, err := os.Stat(filepath.Join(dir, "node-n1.kubeconfig")); err != nil {
		t.Errorf("node kubeconfig from Config.NodeNames: %v", err)
	}
	// A node created on demand can read its own Node only (none exists yet).
	ncfg, err := cp.NodeConfig("n2")
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubernetes.NewForConfigOrDie(ncfg).CoreV1().Nodes().Get(t.Context(), "n2", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("node n2 getting its own (missing) Node: err = %v, want NotFound", err)
	}
	if _, err := cp.NodeKubeconfig("Bad_Name"); err == nil {
		t.Error("NodeKubeconfig(Bad_Name) succeeded, want an error")
	}
	// SeedNamespace: the default ServiceAccount and the CA's ConfigMap, a
	// second call keeping them; a namespace that does not exist fails.
	client, err := cp.AdminClient(50, 100)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := cp.SeedNamespace(t.Context(), client, "default"); err != nil {
			t.Fatalf("SeedNamespace: %v", err)
		}
	}
	if _, err := cs.CoreV1().ServiceAccounts("default").Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("ServiceAccount default/default after SeedNamespace: %v", err)
	}
	ca, err := os.ReadFile(cp.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps("default").Get(t.Context(), "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil || cm.Data["ca.crt"] != string(ca) {
		t.Errorf("ConfigMap kube-root-ca.crt after SeedNamespace: %v, ca.crt is the cluster CA: %v", err, err == nil && cm.Data["ca.crt"] == string(ca))
	}
	if err := cp.SeedNamespace(t.Context(), client, "no-such-namespace"); err == nil || !strings.Contains(err.Error(), "no-such-namespace/default") {
		t.Errorf("SeedNamespace(no-such-namespace) = %v, want an error naming the ServiceAccount", err)
	}

	apiserver, etcd := cp.apiserver, cp.etcd
	if err := cp.Stop(stopCtx(t)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !apiserver.exited() || !etcd.exited() {
		t.Error("processes still running after Stop")
	}
	if err := cp.Stop(stopCtx(t)); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if live, err := LiveProcesses(dir); err != nil || len(live) != 0 {
		t.Errorf("LiveProcesses after Stop = %v, %v; want none", live, err)
	}
}

func TestControlPlaneDetachedAttachStopDir(t *testing.T) {
	requireBinaries(t)
	dir := t.TempDir()
	cp, err := Start(t.Context(), Config{Dir: dir, Detach: true, Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = StopDir(stopCtx(t), dir) })

	live, err := LiveProcesses(dir)
	if err != nil || len(live) != 2 {
		t.Fatalf("LiveProcesses = %v, %v; want etcd and kube-apiserver", live, err)
	}
	if _, err := Start(t.Context(), Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Start in the same dir: err = %v, want 'already running'", err)
	}
	att, err := Attach(t.Context(), dir)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if att.URL != cp.URL || att.EtcdURL != cp.EtcdURL {
		t.Errorf("Attach: URL %s etcd %s, want %s, %s", att.URL, att.EtcdURL, cp.URL, cp.EtcdURL)
	}
	if _, err := att.NodeKubeconfig("n1"); err != nil {
		t.Errorf("NodeKubeconfig after Attach: %v", err)
	}

	if err := StopDir(stopCtx(t), dir); err != nil {
		t.Fatalf("StopDir: %v", err)
	}
	if live, err := LiveProcesses(dir); err != nil || len(live) != 0 {
		t.Errorf("LiveProcesses after StopDir = %v, %v; want none", live, err)
	}
	// StopDir sees a zombie as gone; this process reaps its children a
	// moment later.
	if !cp.apiserver.waitGone(t.Context(), 5*time.Second) || !cp.etcd.waitGone(t.Context(), 5*time.Second) {
		t.Error("processes still running after StopDir")
	}
	if err := StopDir(stopCtx(t), dir); err != nil {
		t.Errorf("second StopDir: %v", err)
	}
	if _, err := Attach(t.Context(), dir); err == nil {
		t.Error("Attach after StopDir succeeded, want an error")
	}
}

func TestStartControlPlaneBadConfig(t *testing.T) {
	if _, err := Start(t.Context(), Config{}); err == nil || !strings.Contains(err.Error(), "Config.Dir") {
		t.Errorf("empty Dir: err = %v, want one naming Config.Dir", err)
	}
	_, err := Start(t.Context(), Config{Dir: t.TempDir(), NodeNames: []string{"ok", "not/ok"}})
	if err == nil || !strings.Contains(err.Error(), "NodeNames[1]") {
		t.Errorf("bad node name: err = %v, want one naming NodeNames[1]", err)
	}
	_, err = Start(t.Context(), Config{Dir: t.TempDir(), BinDir: t.TempDir()})
	var missing *MissingBinaryError
	if !errors.As(err, &missing) || missing.Name != "kube-apiserver" {
		t.Errorf("empty BinDir: err = %v, want a MissingBinaryError for kube-apiserver", err)
	}
}

func TestFindBinDirControlPlane(t *testing.T) {
	t.Setenv(BinDirEnv, "")
	dir, err := FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if !isModuleRoot(filepath.Join(dir, "..", "..", "go.mod")) || filepath.Base(dir) != "bin" {
		t.Errorf("FindBinDir() = %s, want <module root>/_output/bin", dir)
	}
	t.Setenv(BinDirEnv, "/some/where")
	if dir, err := FindBinDir(); err != nil || dir != "/some/where" {
		t.Errorf("FindBinDir() with $%s = %q, %v", BinDirEnv, dir, err)
	}
	t.Setenv(BinDirEnv, "")
	t.Chdir(t.TempDir())
	_, err = FindBinDir()
	var missing *MissingBinaryError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), BinDirEnv) {
		t.Errorf("FindBinDir() outside the module: err = %v, want a MissingBinaryError naming $%s", err, BinDirEnv)
	}
}

func TestStartControlPlaneAPIServerFails(t *testing.T) {
	requireBinaries(t)
	dir := t.TempDir()
	_, err := Start(t.Context(), Config{Dir: dir, APIServerArgs: []string{"--no-such-flag=1"}})
	if err == nil {
		_ = StopDir(stopCtx(t), dir)
		t.Fatal("Start with a bad kube-apiserver flag succeeded")
	}
	t.Logf("error (as a user sees it):\n%v", err)
	for _, want := range []string{"kube-apiserver exited during start-up", "unknown flag: --no-such-flag", "kube-apiserver.log"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q", want)
		}
	}
	if live, err := LiveProcesses(dir); err != nil || len(live) != 0 {
		t.Errorf("after a failed Start, LiveProcesses = %v, %v; want none (etcd stopped again)", live, err)
	}
}

func TestStartControlPlaneTimeout(t *testing.T) {
	requireBinaries(t)
	dir := t.TempDir()
	_, err := Start(t.Context(), Config{Dir: dir, ReadyTimeout: 300 * time.Millisecond})
	if err == nil {
		_ = StopDir(stopCtx(t), dir)
		t.Skip("control plane came up within 300ms; cannot test the timeout")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last lines of") {
		t.Errorf("err = %v, want DeadlineExceeded with a log tail", err)
	}
	if live, err := LiveProcesses(dir); err != nil || len(live) != 0 {
		t.Errorf("after a failed Start, LiveProcesses = %v, %v; want none", live, err)
	}
}

// TestControlPlanePortClash hands etcd and kube-apiserver a port that is
// taken on their first attempt: Start must retry with fresh ports.
func TestControlPlanePortClash(t *testing.T) {
	requireBinaries(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	var mu sync.Mutex
	calls := 0
	pick := func(ctx context.Context, n int) ([]int, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		ports, err := freePorts(ctx, n)
		if err == nil && (calls == 1 || calls == 3) { // first etcd, first kube-apiserver attempt
			ports[0] = takenPort
		}
		return ports, err
	}
	dir := t.TempDir()
	cp, err := Start(t.Context(), Config{Dir: dir, Log: t.Output(), pickPorts: pick})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Stop(stopCtx(t)) }()
	if calls != 4 {
		t.Errorf("ports picked %d times, want 4 (a retry each for etcd and kube-apiserver)", calls)
	}
	if strings.HasSuffix(cp.URL, ":"+strconv.Itoa(takenPort)) {
		t.Errorf("URL %s uses the taken port", cp.URL)
	}
}
