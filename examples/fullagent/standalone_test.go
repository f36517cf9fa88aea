package main

import (
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/agenttest"
)

// standaloneConfig is a configuration for a start without --kubeconfig
// whose runtime endpoint nothing answers on: a start that gets past the
// checks fails there, never reaching a real runtime.
func standaloneConfig(t *testing.T, extra string) (config, root string) {
	t.Helper()
	dir := t.TempDir()
	config = filepath.Join(dir, "config.yaml")
	writeFile(t, config, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+
		"containerRuntimeEndpoint: unix://"+filepath.Join(dir, "none.sock")+"\nruntimeRequestTimeout: 1s\nstaticPodPath: "+dir+"\n"+extra)
	return config, filepath.Join(dir, "root")
}

// TestStandaloneWebhookAuthRefused: without --kubeconfig, webhook
// authentication and webhook authorization (both kubelet's file defaults)
// refuse the start naming the field, as kubelet v1.37's BuildAuth does;
// authentication.webhook.enabled: false with authorization.mode:
// AlwaysAllow gets past the check.
func TestStandaloneWebhookAuthRefused(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         []error // nil: past the check
	}{
		{"defaults", "", []error{errStandaloneAuthn, errStandaloneAuthz}},
		{"authn webhook off", "authentication: {webhook: {enabled: false}}\n", []error{errStandaloneAuthz}},
		{"authz AlwaysAllow", "authorization: {mode: AlwaysAllow}\n", []error{errStandaloneAuthn}},
		{"both chosen", "authentication: {webhook: {enabled: false}}\nauthorization: {mode: AlwaysAllow}\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config, root := standaloneConfig(t, tc.config)
			o, err := parseFlags([]string{"--config=" + config, "--root-dir=" + root, "--hostname-override=n1"}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			err = run(t.Context(), o)
			if err == nil {
				t.Fatal("agent started with an unreachable runtime")
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("start error %q lacks %q", err, w)
				}
			}
			if tc.want == nil && strings.Contains(err.Error(), "without --kubeconfig") {
				t.Fatalf("refused though the operator chose AlwaysAllow and no webhook: %v", err)
			}
			if tc.want != nil && strings.Contains(err.Error(), "container runtime") {
				t.Fatalf("the runtime was dialled before the refusal: %v", err)
			}
		})
	}
}

// TestStandaloneBinaryRefusesWebhook runs the fullagent binary standalone
// with kubelet's file defaults: it exits 1, logging both refusals.
func TestStandaloneBinaryRefusesWebhook(t *testing.T) {
	agenttest.SkipShort(t, "builds the fullagent binary")
	config, root := standaloneConfig(t, "")
	out, err := exec.CommandContext(t.Context(), buildAgent(t), "--config="+config, "--root-dir="+root, "--hostname-override=n1").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("fullagent: %v, want exit status 1\n%s", err, out)
	}
	for _, want := range []string{"authentication.webhook.enabled: true without --kubeconfig", "authorization.mode: Webhook without --kubeconfig",
		"cannot use webhook authentication", "cannot use webhook authorization"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
