package localcri

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The hostpathplugin image on containerd, as upstream's DRA e2e driver
// uses it: busybox writes a file the way the specs write CDI specs
// (base64 -d, mkdir, mv, test), then /hostpathplugin proxies a socket in a
// host directory to a TCP port of the pod, and bytes flow both ways
// between a client on the socket and a peer on the pod's port.
func TestHostpathPluginImage(t *testing.T) {
	requireHost(t)
	ctx := testContext(t)
	_, cli := startWithCRI(ctx, t, Config{ConformanceImages: true})

	plugin := shortDir(t)
	if err := os.Chmod(plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	script := `set -e
echo aGVsbG8gY2Rp | base64 -d >/plugin/spec.tmp
mkdir /plugin/cdi
mv /plugin/spec.tmp /plugin/cdi/spec.json
test -e /plugin/cdi/spec.json
rm -f /plugin/gone
exec /hostpathplugin --v=5 --endpoint=unix:///plugin/dra.sock --proxy-endpoint=tcp://:9001`
	name := fmt.Sprintf("hpp-%d", time.Now().UnixNano())
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name},
		LogDirectory: plugin,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	sb, ctr := startInSandbox(ctx, t, cli, sbCfg, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "proxy"},
		Image:    &runtimeapi.ImageSpec{Image: HostpathPluginImage},
		Command:  []string{"sh", "-c", script},
		LogPath:  "proxy.log",
		Mounts:   []*runtimeapi.Mount{{ContainerPath: "/plugin", HostPath: plugin}},
	})
	// The socket's file appears at bind, a moment before the plugin
	// listens (a connection then is refused): wait for a connection.
	sock := filepath.Join(plugin, "dra.sock")
	var client net.Conn
	waitFor(ctx, t, cli, ctr, func() bool {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false
		}
		client = c
		return true
	})
	defer func() { _ = client.Close() }()
	if data, err := os.ReadFile(filepath.Join(plugin, "cdi", "spec.json")); err != nil || string(data) != "hello cdi" {
		t.Fatalf("the file busybox wrote: %q, %v", data, err)
	}
	pst, err := cli.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb})
	if err != nil {
		t.Fatal(err)
	}
	podIP := pst.GetStatus().GetNetwork().GetIp()

	peer, err := net.Dial("tcp", net.JoinHostPort(podIP, "9001"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = peer.Close() }()
	for _, conn := range []net.Conn{client, peer} {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // a bound, not a wait
	}
	exchange(t, client, peer, "from the node agent")
	exchange(t, peer, client, "from e2e.test")
	_ = peer.Close()
	if rest, err := io.ReadAll(client); err != nil || len(rest) != 0 {
		t.Errorf("client after the peer closed: %q, %v; want EOF", rest, err)
	}
	if log, err := os.ReadFile(filepath.Join(plugin, "proxy.log")); err == nil {
		t.Logf("container log:\n%s", criLogText(string(log)))
	}
}

// exchange writes msg on from and reads it back on to.
func exchange(t *testing.T, from, to net.Conn, msg string) {
	t.Helper()
	if _, err := from.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(to, buf); err != nil || string(buf) != msg {
		t.Fatalf("read %q, %v; want %q", buf, err, msg)
	}
}

// waitFor polls cond for up to a minute while the container runs; it
// fails the test when the container exits first.
func waitFor(ctx context.Context, t *testing.T, cli *criClient, id string, cond func() bool) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		st, err := cli.runtime.ContainerStatus(wctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		if st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Fatalf("container exited %d before the condition held", st.GetStatus().GetExitCode())
		}
		select {
		case <-wctx.Done():
			t.Fatalf("condition not met: %v", wctx.Err())
		case <-tick.C:
		}
	}
}
