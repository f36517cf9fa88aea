package localcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// StopAPIServer stops kube-apiserver alone (SIGTERM, then SIGKILL after a
// grace period or once ctx is done) and keeps etcd, the certificates, the
// kubeconfigs and the port, so that StartAPIServer brings the same API
// server back at the same URL with the cluster's state intact: an API
// server outage, as node agents meet them. Stopping a stopped API server is
// not an error. Stop still stops whatever runs.
func (c *ControlPlane) StopAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.apiserver
	if p == nil {
		return nil
	}
	// Read the command line before the process is gone: StartAPIServer
	// runs exactly it again (same port, flags and binary).
	cmd := procCmdline(p.pid)
	if len(cmd) == 0 && !p.exited() {
		return fmt.Errorf("localcp: stop kube-apiserver (pid %d): cannot read its command line", p.pid)
	}
	if err := p.stop(ctx, stopGrace); err != nil {
		return fmt.Errorf("localcp: %w", err)
	}
	c.apiserver = nil
	if len(cmd) > 0 {
		c.apiserverCmd = cmd
	}
	if err := os.Remove(pidFilePath(c.Dir, p.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("localcp: remove %s pidfile: %w", p.name, err)
	}
	c.logf("kube-apiserver stopped (etcd keeps running); StartAPIServer brings it back at %s", c.URL)
	return nil
}

// StartAPIServer starts the API server StopAPIServer stopped, with the same
// command line (so on the same port, against the same etcd), appending to
// its log, and returns once /readyz answers ok. ctx (and at most
// DefaultReadyTimeout) bounds the start-up only. Starting a running API
// server is not an error; starting one that was never stopped with
// StopAPIServer is. If the port was taken meanwhile the error says so: the
// URL is in every kubeconfig, so no other port is tried.
func (c *ControlPlane) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	if c.apiserver != nil && !c.apiserver.exited() {
		c.mu.Unlock()
		return nil
	}
	cmd, detach := c.apiserverCmd, c.detach
	c.mu.Unlock()
	if len(cmd) == 0 {
		return errors.New("localcp: StartAPIServer: no API server was stopped with StopAPIServer")
	}
	startCtx, cancel := context.WithTimeout(ctx, DefaultReadyTimeout)
	defer cancel()
	c.logf("starting kube-apiserver again at %s, log %s", c.URL, LogPath(c.Dir, ProcAPIServer))
	p, err := startProcLog(startCtx, c.Dir, ProcAPIServer, cmd[0], cmd[1:], detach, os.O_APPEND)
	if err != nil {
		return fmt.Errorf("localcp: %w", err)
	}
	if err := c.waitReady(startCtx, p, "kube-apiserver /readyz at "+c.URL, c.Ready); err != nil {
		_ = p.stop(context.WithoutCancel(ctx), 0)
		if portClash(p) {
			return fmt.Errorf("localcp: restart kube-apiserver: its port (%s) was taken while it was stopped: %w", c.URL, err)
		}
		return fmt.Errorf("localcp: restart kube-apiserver: %w", err)
	}
	c.mu.Lock()
	c.apiserver, c.apiserverCmd = p, nil
	c.mu.Unlock()
	return nil
}

// procCmdline returns pid's command line, nil if it cannot be read.
func procCmdline(pid int) []string {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(raw) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
}

// EtcdDelete deletes key from etcd directly (through etcd's v3 JSON
// gateway), behind the API server's back, and returns how many keys were
// deleted. The API server's objects live under /registry/RESOURCE/NS/NAME.
// Meant for changes made while the API server is stopped: a running API
// server's watch cache would not see them until it relists.
func (c *ControlPlane) EtcdDelete(ctx context.Context, key string) (int64, error) {
	body, err := json.Marshal(map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key))})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.EtcdURL+"/v3/kv/deleterange", bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("localcp: etcd delete %s: %w", key, err)
	}
	req.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true} // loopback only
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, fmt.Errorf("localcp: etcd delete %s: %w", key, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, fmt.Errorf("localcp: etcd delete %s: %w", key, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("localcp: etcd delete %s: %s: %s", key, resp.Status, strings.TrimSpace(string(data)))
	}
	var out struct {
		Deleted string `json:"deleted"` // int64 as a JSON string, absent when 0
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return 0, fmt.Errorf("localcp: etcd delete %s: answer %q: %w", key, data, err)
	}
	if out.Deleted == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(out.Deleted, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("localcp: etcd delete %s: answer %q: %w", key, data, err)
	}
	return n, nil
}
