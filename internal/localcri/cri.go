package localcri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criClient is a CRI v1 connection to one instance.
type criClient struct {
	conn    *grpc.ClientConn
	runtime runtimeapi.RuntimeServiceClient
	images  runtimeapi.ImageServiceClient
}

func dialCRI(socket string) (*criClient, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial CRI at %s: %w", socket, err)
	}
	return &criClient{
		conn:    conn,
		runtime: runtimeapi.NewRuntimeServiceClient(conn),
		images:  runtimeapi.NewImageServiceClient(conn),
	}, nil
}

func (c *criClient) Close() { _ = c.conn.Close() }

// checkReady asks for Version and Status and wants the runtime and the
// network ready. It returns the runtime's version.
func (c *criClient) checkReady(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := c.runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return "", fmt.Errorf("CRI Version: %w", err)
	}
	st, err := c.runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return "", fmt.Errorf("CRI Status: %w", err)
	}
	var notReady []string
	for _, want := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		ok := false
		for _, cond := range st.GetStatus().GetConditions() {
			if cond.GetType() == want && cond.GetStatus() {
				ok = true
			} else if cond.GetType() == want {
				notReady = append(notReady, fmt.Sprintf("%s=false (%s: %s)", want, cond.GetReason(), cond.GetMessage()))
				ok = true
			}
		}
		if !ok {
			notReady = append(notReady, want+" missing")
		}
	}
	if len(notReady) > 0 {
		return "", fmt.Errorf("CRI Status: %s", strings.Join(notReady, "; "))
	}
	return v.GetRuntimeVersion(), nil
}

// waitReady polls the CRI until it is ready, containerd exits, or the
// deadline passes. It returns the runtime version CRI Version reports.
func waitReady(ctx context.Context, c *Containerd, l layout) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	cli, err := dialCRI(l.socket)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if _, err := os.Stat(l.socket); err == nil {
			var v string
			if v, last = cli.checkReady(ctx); last == nil {
				return v, nil
			}
			if status.Code(errors.Unwrap(last)) == codes.Unimplemented {
				// The CRI plugin failed to load: waiting will not help.
				return "", fmt.Errorf("containerd serves no CRI: %w; log: %s", last, logTail(l.logFile))
			}
		} else {
			last = fmt.Errorf("socket not there yet: %w", err)
		}
		select {
		case <-c.done:
			return "", fmt.Errorf("containerd exited during start-up; log: %s", logTail(l.logFile))
		case <-ctx.Done():
			return "", fmt.Errorf("containerd did not become ready: %w (last: %w); log: %s",
				context.Cause(ctx), last, logTail(l.logFile))
		case <-tick.C:
		}
	}
}

// importImages imports each tarball into the k8s.io namespace with ctr and
// waits until the CRI lists every tag.
func importImages(ctx context.Context, bins binaries, l layout, c *Containerd, images []ImageTar) error {
	for _, it := range images {
		// The index of each tarball names its images in full
		// (io.containerd.image.name), tags and repo digests alike.
		cmd := exec.CommandContext(ctx, bins.ctr, "--address", l.socket, "--namespace", "k8s.io",
			"images", "import", "--snapshotter", "overlayfs", it.Path)
		cmd.Env = childEnv(bins)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("import image %s (%s): %w: %s", it.Name, it.Path, err, bytes.TrimSpace(out))
		}
	}
	cli, err := dialCRI(l.socket)
	if err != nil {
		return err
	}
	defer cli.Close()
	// The CRI picks imported images up from containerd's events.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		missing, err := cli.missingImages(ctx, images)
		if err == nil && len(missing) == 0 {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("CRI ListImages lacks %s", strings.Join(missing, ", "))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("imported images: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// missingImages returns the tags, repo digests and ids of images that the
// CRI does not list.
func (c *criClient) missingImages(ctx context.Context, images []ImageTar) ([]string, error) {
	resp, err := c.images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI ListImages: %w", err)
	}
	have := map[string]bool{}
	for _, img := range resp.GetImages() {
		have[img.GetId()] = true
		for _, r := range append(img.GetRepoTags(), img.GetRepoDigests()...) {
			have[r] = true
		}
	}
	var missing []string
	for _, it := range images {
		for _, r := range append(append([]string{it.ID}, it.Tags...), it.RepoDigests...) {
			if !have[r] {
				missing = append(missing, r)
			}
		}
	}
	sort.Strings(missing)
	return missing, nil
}

// cleanupPods stops and removes every pod sandbox (and so its containers,
// network and mounts) through the CRI.
func cleanupPods(ctx context.Context, socket string) error {
	if _, err := os.Stat(socket); err != nil {
		return nil
	}
	cli, err := dialCRI(socket)
	if err != nil {
		return err
	}
	defer cli.Close()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := cli.runtime.ListPodSandbox(lctx, &runtimeapi.ListPodSandboxRequest{})
	cancel()
	if err != nil {
		return fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	var errs []error
	for _, p := range resp.GetItems() {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if _, err := cli.runtime.StopPodSandbox(pctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("CRI StopPodSandbox %s: %w", p.GetId(), err))
		} else if _, err := cli.runtime.RemovePodSandbox(pctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("CRI RemovePodSandbox %s: %w", p.GetId(), err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// LogTail returns the last lines of the instance's containerd log
// (Dir/logs/containerd.log), for failure messages.
func (c *Containerd) LogTail() string { return logTail(newLayout(c.Dir).logFile) }

// CDIDir is the directory of CDI spec files containerd 2 reads
// (cdi_spec_dirs); containerd 1.6 reads none.
func (c *Containerd) CDIDir() string { return newLayout(c.Dir).cdi }

// logTail returns the last lines of containerd's log, for error messages.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "\n\t" + strings.Join(lines, "\n\t")
}
