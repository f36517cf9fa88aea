package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/cgroupmgr"
)

// TestProtectKernelDefaults: with protectKernelDefaults the agent refuses
// to start on a host whose kernel tunables differ from upstream's expected
// values, naming each one; the check runs before anything is connected.
func TestProtectKernelDefaults(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	// An endpoint nothing answers on: a host with the expected tunables
	// gets past the check and fails there, never reaching a real runtime.
	yaml := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nprotectKernelDefaults: true\n" +
		"containerRuntimeEndpoint: unix://" + filepath.Join(dir, "none.sock") + "\nruntimeRequestTimeout: 1s\nstaticPodPath: " + dir + "\n" +
		"authentication: {webhook: {enabled: false}}\nauthorization: {mode: AlwaysAllow}\n" // standalone
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	hostErr := cgroupmgr.CheckKernelDefaults("/proc/sys")
	o, err := parseFlags([]string{"--config=" + cfg, "--root-dir=" + filepath.Join(dir, "root"), "--hostname-override=n1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), o)
	if err == nil {
		t.Fatal("agent started with an unreachable runtime")
	}
	if hostErr == nil {
		if strings.Contains(err.Error(), "protectKernelDefaults") {
			t.Fatalf("host has the expected tunables, yet: %v", err)
		}
		t.Logf("this host has upstream's kernel tunables; start failed later, as it should: %v", err)
		return
	}
	if want := "protectKernelDefaults: " + hostErr.Error(); err.Error() != want {
		t.Fatalf("start error %q, want %q", err, want)
	}
	t.Logf("refused: %v", err)
}
