package localcp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
)

// The optional controllers; their names are also pidfile and log names.
const (
	ProcControllerManager = "kube-controller-manager"
	ProcScheduler         = "kube-scheduler"
)

// ControllerBinaries resolves kube-controller-manager and kube-scheduler in
// binDir ("" means FindBinDir()). A missing one is reported as a
// *MissingBinaryError, so test kits can skip.
func ControllerBinaries(binDir string) (controllerManager, scheduler string, err error) {
	if binDir == "" {
		if binDir, err = FindBinDir(); err != nil {
			return "", "", err
		}
	}
	var errs []error
	find := func(name string) string {
		p := filepath.Join(binDir, name)
		if err := isExecutable(p); err != nil {
			e := &MissingBinaryError{Name: name, Looked: []string{binDir}}
			if !errors.Is(err, fs.ErrNotExist) {
				e.Reason = err.Error()
			}
			errs = append(errs, e)
			return ""
		}
		return p
	}
	controllerManager, scheduler = find(ProcControllerManager), find(ProcScheduler)
	return controllerManager, scheduler, errors.Join(errs...)
}

// StartControllerManager starts kube-controller-manager (the binary at bin)
// against the control plane with the admin credentials and returns once its
// /healthz answers ok. It runs every controller but node IPAM (no pod CIDRs
// are allocated here), signs CSRs with the control plane's CA, issues
// service-account tokens with its key, and gives each controller its own
// service account, as a kubeadm cluster does. extra is appended to the
// flags. It is stopped by Stop, before the API server.
func (c *ControlPlane) StartControllerManager(ctx context.Context, bin string, extra ...string) error {
	args := []string{
		"--kubeconfig=" + c.AdminKubeconfig,
		"--controllers=*,-nodeipam",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + c.ServiceAccountKeyFile,
		"--root-ca-file=" + c.CAFile,
		"--cluster-signing-cert-file=" + c.CAFile,
		"--cluster-signing-key-file=" + c.CAKeyFile,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
	}
	return c.startController(ctx, ProcControllerManager, bin, append(args, extra...))
}

// StartScheduler starts kube-scheduler (the binary at bin) with the admin
// credentials and returns once its /healthz answers ok. extra is appended
// to the flags. It is stopped by Stop, before the API server.
func (c *ControlPlane) StartScheduler(ctx context.Context, bin string, extra ...string) error {
	args := []string{
		"--kubeconfig=" + c.AdminKubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
	}
	return c.startController(ctx, ProcScheduler, bin, append(args, extra...))
}

// startController starts one controller process on a free secure port and
// waits for its /healthz, retrying with a new port when the one picked was
// taken meanwhile.
func (c *ControlPlane) startController(ctx context.Context, name, bin string, args []string) error {
	c.mu.Lock()
	running := c.controllers[name] != nil
	c.mu.Unlock()
	if running {
		return fmt.Errorf("localcp: %s is already running", name)
	}
	for attempt := 1; ; attempt++ {
		ports, err := c.pickPorts(ctx, 1)
		if err != nil {
			return fmt.Errorf("localcp: %s: %w", name, err)
		}
		url := "https://127.0.0.1:" + strconv.Itoa(ports[0]) + "/healthz"
		c.logf("starting %s (%s), log %s", name, bin, LogPath(c.Dir, name))
		p, err := startProc(ctx, c.Dir, name, bin, append(args, "--secure-port="+strconv.Itoa(ports[0])), c.detach)
		if err != nil {
			return fmt.Errorf("localcp: %w", err)
		}
		err = c.waitReady(ctx, p, name+" /healthz at "+url, func(ctx context.Context) error { return healthz(ctx, url) })
		if err == nil {
			c.mu.Lock()
			if c.controllers == nil {
				c.controllers = map[string]*proc{}
			}
			c.controllers[name] = p
			c.mu.Unlock()
			return nil
		}
		_ = p.stop(ctx, 0)
		_ = os.Remove(pidFilePath(c.Dir, name))
		if attempt < startAttempts && portClash(p) {
			c.logf("%s could not bind its port; retrying with a new one", name)
			continue
		}
		return fmt.Errorf("localcp: %w", err)
	}
}

// healthz asks a controller's /healthz; it serves a self-signed
// certificate, which is all there is to verify on loopback.
func healthz(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a loopback health check of a self-signed server
	}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s", resp.Status)
	}
	return nil
}
