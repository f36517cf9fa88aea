package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/internal/kubeletconf"
)

// cadvisorLinkedSocket is where cadvisor's containerd handler, linked
// into kubelet, looks for containerd (a flag of its own, not kubelet's
// containerRuntimeEndpoint): without a containerd there, kubelet serves
// container cgroups with the id label only.
const cadvisorLinkedSocket = "/run/containerd/containerd.sock"

// TestCadvisorSideBySide runs the same busy pod on kubelet v1.37.2 and on
// fullagent, each with its own containerd, and compares their
// /metrics/cadvisor: every family kubelet serves for the root, kubepods,
// QoS, pod, sandbox and container cgroups is served by fullagent for the
// same cgroups with the same label names (but the sandbox's block I/O,
// see dropSandboxBlockIO), the container's label values
// agree, and so do the root's block-device filesystems and their sizes.
// The pod writes 20 MiB to an emptyDir with O_DIRECT, so the per-cgroup
// block I/O families (container_fs_writes_bytes_total, ...) are compared
// as well, and each agent must count those bytes for the container.
// The kubelet's containerd is linked at cadvisor's fixed socket path for
// the test (refused if something is there already).
func TestCadvisorSideBySide(t *testing.T) {
	agenttest.SkipShort(t, "kubelet and fullagent as processes")
	kubeletBin := findKubelet(t)
	if _, err := os.Lstat(cadvisorLinkedSocket); err == nil {
		t.Fatalf("%s exists: another containerd (or this test) owns cadvisor's socket path", cadvisorLinkedSocket)
	}
	cp := agenttest.StartControlPlane(t)
	cp.SeedNamespace(t, "default")
	agents := []*sbsAgent{{name: "kubelet", node: "sbs-kubelet"}, {name: "fullagent", node: "sbs-fullagent"}}
	bins := map[string]string{"kubelet": kubeletBin, "fullagent": buildAgent(t)}
	for _, a := range agents {
		cri := agenttest.StartContainerd(t)
		if a.name == "kubelet" {
			if err := os.MkdirAll(filepath.Dir(cadvisorLinkedSocket), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(cri.Socket, cadvisorLinkedSocket); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(cadvisorLinkedSocket) })
		}
		dir := t.TempDir()
		agenttest.UnmountBelowOnCleanup(t, dir)
		root := filepath.Join(dir, "root")
		gw := cri.Gateway.String()
		cgRoot := agenttest.CgroupRoot(t)
		a.blockIO = chargeBlockIO(t, cgRoot, dir)
		conf := kubeletconf.Common(kubeletconf.Node{
			PodLogsDir: filepath.Join(dir, "logs"), RuntimeEndpoint: cri.Endpoint, Address: gw,
			CgroupRoot: cgRoot, ClientCAFile: cp.CAFile, HealthzAddress: gw,
		})
		if a.name == "kubelet" {
			conf += kubeletconf.KubeletOnly("")
		}
		config := filepath.Join(dir, a.name+".yaml")
		writeFile(t, config, conf)
		args := append(kubeletconf.Args(cp.NodeKubeconfig(a.node), config, a.node, gw, root), "-v=2")
		a.proc = newAgentProcess(t, bins[a.name], filepath.Join(dir, a.name+".log"), args)
	}
	for _, a := range agents {
		a.proc.start()
	}
	client := cp.AdminClient()
	ctx := t.Context()
	for _, a := range agents {
		// 20 MiB of direct (unbuffered) writes to an emptyDir on the
		// node's disk: under cgroup v1 only direct I/O is charged to the
		// writer's blkio cgroup, so the block I/O series appear.
		p := simplePod("cm-"+a.name, v1.RestartPolicyAlways,
			"dd if=/dev/zero of=/scratch/f bs=1M count=20 oflag=direct && sync; while true; do :; done")
		p.Namespace, p.Spec.NodeName = "default", a.node
		p.Spec.Containers[0].Image = agenttest.BusyboxImage
		p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		err := wait.PollUntilContextTimeout(ctx, time.Second, 120*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range agents {
		err := wait.PollUntilContextTimeout(ctx, time.Second, 180*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods("default").Get(ctx, "cm-"+a.name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == v1.PodRunning, nil
		})
		if err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
	}
	// kubelet's cadvisor finds new cgroups on its housekeeping (up to 15s).
	var kinds [2]map[string]map[string]bool
	var app, pages [2]string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		for i, a := range agents {
			b, err := client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", a.node, "proxy", "metrics", "cadvisor").DoRaw(ctx)
			if err != nil {
				return false, nil
			}
			kinds[i], app[i] = cadvisorKinds(string(b), "cm-"+a.name)
			pages[i] = string(b)
		}
		return app[0] != "" && len(kinds[0]["container_cpu_usage_seconds_total"]) == 6 &&
			(!agents[0].blockIO || kinds[0]["container_fs_writes_bytes_total"]["container(device)"]), nil
	})
	if err != nil {
		t.Fatalf("kubelet's /metrics/cadvisor never showed the pod's six cgroup kinds and the container's block I/O: %v, %v",
			kinds[0]["container_cpu_usage_seconds_total"], kinds[0]["container_fs_writes_bytes_total"])
	}
	for i, a := range agents {
		if w := containerWrites(pages[i], "cm-"+a.name); a.blockIO && w < 20<<20 {
			t.Errorf("%s: the container's container_fs_writes_bytes_total sum to %v, want at least the 20 MiB dd wrote", a.name, w)
		}
	}
	for i := range kinds {
		dropSandboxBlockIO(kinds[i])
	}
	for fam, k := range kinds[0] {
		if got := kinds[1][fam]; !maps.Equal(got, k) {
			t.Errorf("%s: kubelet serves it for %v, fullagent for %v", fam, slices.Sorted(maps.Keys(k)), slices.Sorted(maps.Keys(got)))
		}
	}
	for fam := range kinds[1] {
		if _, ok := kinds[0][fam]; !ok {
			t.Errorf("%s: served by fullagent, not by kubelet", fam)
		}
	}
	if app[0] != app[1] {
		t.Errorf("the container's labels (but id, name, pod): kubelet %s, fullagent %s", app[0], app[1])
	}
	// Mounts come and go on this machine (each agent lists them when it
	// starts); the disks stay.
	if k, f := rootDiskLimits(pages[0]), rootDiskLimits(pages[1]); len(k) == 0 || !maps.Equal(k, f) {
		t.Errorf("the root's container_fs_limit_bytes by disk: kubelet %v, fullagent %v", k, f)
	}
}

// chargeBlockIO makes the kernel count block I/O in the blkio (v1)
// counters of the cgroups below cgRoot on dir's disk: from Linux 6.x (seen
// on 6.18) the v1 throttle counters count only below a throttle limit, so
// it sets a write limit no one reaches (1 TiB/s). False where it cannot
// (no v1 blkio, dir on a partition or no block device); v2's io.stat
// counts without it (true).
func chargeBlockIO(t *testing.T, cgRoot, dir string) bool {
	t.Helper()
	blkio := filepath.Join("/sys/fs/cgroup/blkio", cgRoot)
	if _, err := os.Stat(blkio); err != nil {
		_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
		return err == nil
	}
	// Not checking is a skip: it fails the test under
	// $NODEKIT_REQUIRE_INTEGRATION.
	notChecked := t.Logf
	if os.Getenv("NODEKIT_REQUIRE_INTEGRATION") != "" {
		notChecked = t.Fatalf
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		notChecked("block I/O not checked: %v", err)
		return false
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	limit := dev + " 1099511627776"
	if err := os.WriteFile(filepath.Join(blkio, "blkio.throttle.write_bps_device"), []byte(limit), 0o644); err != nil {
		notChecked("block I/O not checked: limit %s: %v", dev, err)
		return false
	}
	return true
}

// dropSandboxBlockIO removes the sandbox's series from the block I/O
// families (container_fs_reads*, container_fs_writes*,
// container_blkio_device_usage_total). Both agents serve them when the
// sandbox's cgroup has block I/O counters, and whether the pause process
// was charged any I/O (likely a read of its binary that missed the page
// cache; not checked) differs between the two pods from run to run: once,
// on containerd 2,
// fullagent's pod's sandbox had counters and kubelet's had none. The
// container's block I/O, which the pod's dd makes certain, is compared.
func dropSandboxBlockIO(kinds map[string]map[string]bool) {
	for fam, k := range kinds {
		if !strings.HasPrefix(fam, "container_fs_reads") && !strings.HasPrefix(fam, "container_fs_writes") &&
			fam != "container_blkio_device_usage_total" {
			continue
		}
		for kind := range k {
			if strings.HasPrefix(kind, "sandbox(") {
				delete(k, kind)
			}
		}
	}
}

// containerWrites sums pod's app container's container_fs_writes_bytes_total
// over its devices on a /metrics/cadvisor page.
func containerWrites(page, pod string) float64 {
	var sum float64
	for _, line := range strings.Split(page, "\n") {
		if !strings.HasPrefix(line, "container_fs_writes_bytes_total{") || !strings.Contains(line, `container="app"`) ||
			!strings.Contains(line, `pod="`+pod+`"`) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// rootDiskLimits reads the root cgroup's container_fs_limit_bytes of the
// block devices (device="/dev/...", but the /dev/shm tmpfs) on a
// /metrics/cadvisor page: device to value.
func rootDiskLimits(page string) map[string]string {
	out := map[string]string{}
	sample := regexp.MustCompile(`^container_fs_limit_bytes\{.*device="(/dev/[^"]+)".*id="/",.*\} (\S+)`)
	for _, line := range strings.Split(page, "\n") {
		if m := sample.FindStringSubmatch(line); m != nil && m[1] != "/dev/shm" {
			out[m[1]] = m[2]
		}
	}
	return out
}

// cadvisorKinds reads a /metrics/cadvisor page: for each family, the kinds
// of cgroup it is served for ("root", "kubepods", "qos", "pod", "sandbox",
// "container", with any extra label names), and the labels but id, name
// and pod of pod's container's container_cpu_usage_seconds_total.
func cadvisorKinds(page, pod string) (map[string]map[string]bool, string) {
	out := map[string]map[string]bool{}
	var app string
	label := regexp.MustCompile(`(\w+)="([^"]*)"`)
	qos := regexp.MustCompile(`/kubepods/(besteffort|burstable)$`)
	for _, line := range strings.Split(page, "\n") {
		fam, rest, ok := strings.Cut(line, "{")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		labels := map[string]string{}
		var extra, kept []string
		for _, m := range label.FindAllStringSubmatch(rest[:strings.LastIndexByte(rest, '}')], -1) {
			labels[m[1]] = m[2]
			switch m[1] {
			case "id", "name", "image", "pod", "namespace", "container":
			default:
				extra = append(extra, m[1])
			}
			if m[1] != "id" && m[1] != "name" && m[1] != "pod" {
				kept = append(kept, m[0])
			}
		}
		id, ok := labels["id"]
		kind := "machine"
		switch {
		case !ok:
		case id == "/":
			kind = "root"
		case strings.HasSuffix(id, "/kubepods"):
			kind = "kubepods"
		case qos.MatchString(id):
			kind = "qos"
		case strings.HasPrefix(path.Base(id), "pod"):
			kind = "pod"
		case strings.HasPrefix(labels["image"], "registry.k8s.io/pause"):
			kind = "sandbox"
		case labels["container"] != "":
			kind = "container"
		default:
			kind = "other " + id
		}
		if len(extra) > 0 {
			kind += "(" + strings.Join(extra, ",") + ")"
		}
		if out[fam] == nil {
			out[fam] = map[string]bool{}
		}
		out[fam][kind] = true
		if fam == "container_cpu_usage_seconds_total" && labels["pod"] == pod && labels["container"] != "" {
			app = strings.Join(kept, ",")
		}
	}
	return out, app
}
