package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/internal/kubeletconf"
)

// csiSBSAgent is one agent of a CSI side-by-side test: the upstream
// kubelet v1.37.2 or fullagent, on its own node with its own containerd,
// root dir and instance of the test kit's CSI driver.
type csiSBSAgent struct {
	name, node, root string
	env              *env // the shared client and this agent's containerd
	proc             *agentProcess
	drv              *csitest.Process
	// driverBin is the test driver's binary; extra are drivers a test
	// starts beside drv.
	driverBin string
	extra     []*csitest.Process
}

// startCSISideBySide starts a control plane with kube-controller-manager
// and, on it, the kubelet and fullagent on the nodes PREFIX-kubelet and
// PREFIX-fullagent, each with extraConfig (KubeletConfiguration lines) and
// a CSI driver of o (its NodeID NODE-id, registering in the agent's
// ROOT/plugins_registry), and waits for each agent's CSINode to list the
// driver.
func startCSISideBySide(t *testing.T, prefix, extraConfig string, o csitest.Options) (*agenttest.ControlPlane, []*csiSBSAgent) {
	t.Helper()
	agenttest.SkipShort(t, "kubelet and fullagent as processes")
	kubeletBin := findKubelet(t)
	cp := agenttest.StartControlPlane(t, agenttest.WithControllerManager())
	cp.SeedNamespace(t, "default")
	client := cp.AdminClient()
	driverBin, err := csitest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	agents := []*csiSBSAgent{{name: "kubelet", node: prefix + "-kubelet"}, {name: "fullagent", node: prefix + "-fullagent"}}
	bins := map[string]string{"kubelet": kubeletBin, "fullagent": buildAgent(t)}
	for _, a := range agents {
		cri := agenttest.StartContainerd(t)
		dir := t.TempDir()
		agenttest.UnmountBelowOnCleanup(t, dir)
		a.root = filepath.Join(dir, "root")
		if err := os.MkdirAll(a.root, 0o755); err != nil {
			t.Fatal(err)
		}
		gw := cri.Gateway.String()
		conf := kubeletconf.Common(kubeletconf.Node{
			PodLogsDir: filepath.Join(dir, "logs"), RuntimeEndpoint: cri.Endpoint, Address: gw,
			CgroupRoot: agenttest.CgroupRoot(t), ClientCAFile: cp.CAFile, HealthzAddress: gw, Extra: extraConfig,
		})
		if a.name == "kubelet" {
			conf += kubeletconf.KubeletOnly("")
		}
		config := filepath.Join(dir, a.name+".yaml")
		writeFile(t, config, conf)
		args := append(kubeletconf.Args(cp.NodeKubeconfig(a.node), config, a.node, gw, a.root), "-v=2")
		a.proc = newAgentProcess(t, bins[a.name], filepath.Join(dir, a.name+".log"), args)
		a.proc.start()
		do := o
		do.NodeID, do.RegistryDir = a.node+"-id", filepath.Join(a.root, "plugins_registry")
		if do.Name == "" {
			do.Name = csiTestDriver
		}
		a.drv, a.driverBin = csitest.Start(t, driverBin, do), driverBin
		a.env = &env{client: client, cri: cri, rootDir: a.root}
	}
	for _, a := range agents {
		poll(t, 120*time.Second, a.name+": CSINode lists the driver", func(ctx context.Context) (bool, error) {
			cn, err := client.StorageV1().CSINodes().Get(ctx, a.node, metav1.GetOptions{})
			return err == nil && len(cn.Spec.Drivers) == 1, nil
		})
	}
	return cp, agents
}

// inlineHandle is upstream's volume ID of a CSI inline volume:
// csi-SHA256(POD-UID VOLUME-NAME).
func inlineHandle(uid types.UID, volume string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(string(uid)+volume)))
}

// stagingHash is the directory name upstream gives a volume's staging
// path (plugins/kubernetes.io/csi/DRIVER/SHA256(HANDLE)/globalmount).
func stagingHash(handle string) string {
	return fmt.Sprintf("%x", sha256.Sum256([]byte(handle)))
}
