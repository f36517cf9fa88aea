package csi_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/kubeclient/clientgo"
	"github.com/nodekit/nodekit/volumemgr"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

// TestServiceAccountTokens: a CSIDriver's tokenRequests give the driver
// one token of the pod's service account per audience, bound to the pod,
// as upstream's JSON in the volume context (or in the publish secrets with
// serviceAccountTokenInSecrets); requiresRepublish publishes again on
// the next refresh with a fresh token; a driver with VOLUME_MOUNT_GROUP
// gets the pod's fsGroup in the capability and applies it itself.
func TestServiceAccountTokens(t *testing.T) {
	for _, inSecrets := range []bool{false, true} {
		name := "volume context"
		if inSecrets {
			name = "publish secrets"
		}
		t.Run(name, func(t *testing.T) { testServiceAccountTokens(t, inSecrets) })
	}
}

func testServiceAccountTokens(t *testing.T, inSecrets bool) {
	drv := csiDriver(storagev1.VolumeLifecycleEphemeral)
	drv.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: "vault", ExpirationSeconds: ptr.To[int64](3600)}, {Audience: ""}}
	drv.Spec.RequiresRepublish = ptr.To(true)
	drv.Spec.ServiceAccountTokenInSecrets = ptr.To(inSecrets)
	e := newEnvWith(t, csitest.Options{VolumeMountGroup: true}, drv)
	var asked []string
	n := 0
	tokens := volumemgr.TokenRequesterFunc(func(_ context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
		ref := req.Spec.BoundObjectRef
		asked = append(asked, ns+"/"+sa+" "+strings.Join(req.Spec.Audiences, ",")+" bound to "+ref.Kind+"/"+ref.Name+"/"+string(ref.UID))
		n++
		return &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "tok-" + string(rune('0'+n)),
			ExpirationTimestamp: metav1.NewTime(time.Unix(2000, 0))}}, nil
	})
	var err error
	e.plugin, err = csi.NewPlugin(csi.PluginConfig{RootDir: e.root, Drivers: e.drivers, API: csi.FromClient(clientgo.Wrap(e.cs)), NodeName: nodeName, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Now())
	m := e.manager(clk, &events{})
	pod := podWith("p", "uid-1", v1.Volume{Name: "secrets", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: driverName}}})
	pod.Spec.ServiceAccountName = "app"
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](4321)}
	m.AddPod(pod)
	m.Reconcile(e.ctx)
	if len(m.MountedVolumes("uid-1")) != 1 {
		t.Fatalf("not mounted: %v", e.calls())
	}
	want := []string{"default/app vault bound to Pod/p/uid-1", "default/app  bound to Pod/p/uid-1"}
	if !slices.Equal(asked, want) {
		t.Errorf("token requests %q, want %q", asked, want)
	}
	published := func() map[string]authenticationv1.TokenRequestStatus {
		t.Helper()
		file := csitest.ContextLogFile
		if inSecrets {
			file = csitest.SecretsLogFile
		}
		b, err := os.ReadFile(filepath.Join(e.drv.StateDir, file))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		last := lines[len(lines)-1]
		i := strings.Index(last, "csi.storage.k8s.io/serviceAccount.tokens=")
		if i < 0 {
			t.Fatalf("no tokens in %s: %q", file, last)
		}
		raw := last[i+len("csi.storage.k8s.io/serviceAccount.tokens="):]
		if j := strings.Index(raw, "},volume_mount_group="); j >= 0 {
			raw = raw[:j+1]
		}
		var got map[string]authenticationv1.TokenRequestStatus
		if err := json.Unmarshal([]byte(raw), &got); err != nil {
			t.Fatalf("tokens %q: %v", raw, err)
		}
		return got
	}
	if got := published(); got["vault"].Token != "tok-1" || got[""].Token != "tok-2" {
		t.Errorf("tokens the driver got: %+v", got)
	}
	ctxLines, _ := e.drv.Contexts()
	if len(ctxLines) == 0 || !strings.HasSuffix(ctxLines[0], "volume_mount_group=4321") {
		t.Errorf("publish context %q, want volume_mount_group=4321", ctxLines)
	}
	var st syscall.Stat_t
	target := filepath.Join(volDir(e.root, "uid-1", "secrets"), "mount")
	if err := syscall.Stat(target, &st); err != nil || st.Gid != 4321 {
		t.Errorf("target group %d (%v), want 4321 from the driver", st.Gid, err)
	}

	// requiresRepublish: published again, with new tokens, after a refresh.
	clk.Step(2 * volumemgr.DefaultRefreshPeriod)
	m.Reconcile(e.ctx)
	publishes := slices.DeleteFunc(e.calls(), func(c string) bool { return !strings.HasPrefix(c, "NodePublishVolume") })
	if len(publishes) != 2 {
		t.Errorf("publishes %q, want 2 (the republish)", publishes)
	}
	if got := published(); got["vault"].Token != "tok-3" {
		t.Errorf("tokens after the republish: %+v, want fresh ones", got)
	}
	m.RemovePod(types.UID("uid-1"))
	m.Reconcile(e.ctx)
}
