package pullrecords

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2/ktesting"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestPrune: the records of images not on the node go, unless written
// during the pass (in the same second as its start, too); the others and
// the intents stay.
func TestPrune(t *testing.T) {
	root := t.TempDir()
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC))
	v, err := New(ctx, Config{RootDir: root, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	anon := &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	for _, ref := range []string{"sha256:kept", "sha256:gone"} {
		v.RecordPulled(ctx, "registry.example/app:"+strings.TrimPrefix(ref, "sha256:"), ref, anon)
	}
	if err := v.RecordIntent(ctx, "registry.example/pulling:1"); err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * time.Second)
	began := clk.Now().Add(300 * time.Millisecond)
	clk.Step(700 * time.Millisecond) // within the second the pass began in
	v.RecordPulled(ctx, "registry.example/app:new", "sha256:new", anon)

	v.Prune(ctx, []string{"sha256:kept", "sha256:unrecorded"}, began)

	pulled := filepath.Join(root, "image_manager", "pulled")
	for ref, want := range map[string]bool{"sha256:kept": true, "sha256:gone": false, "sha256:new": true} {
		_, err := os.Stat(filepath.Join(pulled, hashName(ref)))
		if got := err == nil; got != want {
			t.Errorf("record of %s there: %v, want %v (%v)", ref, got, want, err)
		}
	}
	if ok, _ := v.files.intentExists("registry.example/pulling:1"); !ok {
		t.Error("Prune removed an intent")
	}
	// The cache forgot it too: the image, back under the same ID without
	// a pull of the agent, is preloaded again.
	if v.MustPull(ctx, "registry.example/app:gone", "sha256:gone", nil) {
		t.Error("a pruned record still makes the image count as pulled by the agent")
	}
	if got := testutil.ToFloat64(v.metrics.ondiskRecords); got != 2 {
		t.Errorf("kubelet_imagemanager_ondisk_pulledrecords = %v after the prune, want 2", got)
	}
}

// TestMetricsMove reads the kubelet_imagemanager_* family from a registry
// as pulls, checks and a prune move it.
func TestMetricsMove(t *testing.T) {
	root := t.TempDir()
	v, ctx := newTestVerifier(t, root, "")
	reg := prometheus.NewPedanticRegistry()
	if err := v.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	image := "registry.example/team/app:1.0"
	if err := v.RecordIntent(ctx, image); err != nil {
		t.Fatal(err)
	}
	gather := func(want string, names ...string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
			t.Error(err)
		}
	}
	gather(`
# HELP kubelet_imagemanager_ondisk_pullintents [ALPHA] Number of ImagePullIntents stored on disk.
# TYPE kubelet_imagemanager_ondisk_pullintents gauge
kubelet_imagemanager_ondisk_pullintents 1
# HELP kubelet_imagemanager_ondisk_pulledrecords [ALPHA] Number of ImagePulledRecords stored on disk.
# TYPE kubelet_imagemanager_ondisk_pulledrecords gauge
kubelet_imagemanager_ondisk_pulledrecords 0
`, "kubelet_imagemanager_ondisk_pullintents", "kubelet_imagemanager_ondisk_pulledrecords")
	v.RecordPulled(ctx, image, "sha256:img", &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{secretA}})
	// Default sizes: 220 intents and 550 records for 110 pods.
	gather(`
# HELP kubelet_imagemanager_inmemory_pulledrecords_usage_percent [ALPHA] The ImagePulledRecords in-memory cache usage in percent.
# TYPE kubelet_imagemanager_inmemory_pulledrecords_usage_percent gauge
kubelet_imagemanager_inmemory_pulledrecords_usage_percent 0
# HELP kubelet_imagemanager_inmemory_pullintents_usage_percent [ALPHA] The ImagePullIntents in-memory cache usage in percent.
# TYPE kubelet_imagemanager_inmemory_pullintents_usage_percent gauge
kubelet_imagemanager_inmemory_pullintents_usage_percent 0
# HELP kubelet_imagemanager_ondisk_pullintents [ALPHA] Number of ImagePullIntents stored on disk.
# TYPE kubelet_imagemanager_ondisk_pullintents gauge
kubelet_imagemanager_ondisk_pullintents 0
# HELP kubelet_imagemanager_ondisk_pulledrecords [ALPHA] Number of ImagePulledRecords stored on disk.
# TYPE kubelet_imagemanager_ondisk_pulledrecords gauge
kubelet_imagemanager_ondisk_pulledrecords 1
`, "kubelet_imagemanager_ondisk_pullintents", "kubelet_imagemanager_ondisk_pulledrecords",
		"kubelet_imagemanager_inmemory_pullintents_usage_percent", "kubelet_imagemanager_inmemory_pulledrecords_usage_percent")

	v.MustPull(ctx, image, "sha256:img", podCreds([]kubeletv1beta1.ImagePullSecret{secretA}, nil)) // credentialRecordFound
	v.MustPull(ctx, image, "sha256:img", nil)                                                      // mustAuthenticate
	v.MustPull(ctx, "registry.example/preloaded:1", "sha256:pre", nil)                             // credentialPolicyAllowed
	v.MustPull(ctx, image, "", nil)                                                                // absent: not a check
	gather(`
# HELP kubelet_imagemanager_image_mustpull_checks_total [ALPHA] Counter for how many times kubelet checked whether credentials need to be re-verified to access an image
# TYPE kubelet_imagemanager_image_mustpull_checks_total counter
kubelet_imagemanager_image_mustpull_checks_total{result="credentialPolicyAllowed"} 1
kubelet_imagemanager_image_mustpull_checks_total{result="credentialRecordFound"} 1
kubelet_imagemanager_image_mustpull_checks_total{result="mustAuthenticate"} 1
`, "kubelet_imagemanager_image_mustpull_checks_total")

	v.Prune(ctx, nil, v.clock.Now().Add(time.Hour))
	gather(`
# HELP kubelet_imagemanager_ondisk_pulledrecords [ALPHA] Number of ImagePulledRecords stored on disk.
# TYPE kubelet_imagemanager_ondisk_pulledrecords gauge
kubelet_imagemanager_ondisk_pulledrecords 0
`, "kubelet_imagemanager_ondisk_pulledrecords")
}

// TestCacheUsage: the in-memory gauges are kubelet's integer percent of
// the cache sizes kubelet derives from maxPods and maxParallelImagePulls.
func TestCacheUsage(t *testing.T) {
	for _, c := range []struct{ pods, pulls, intents, records int }{
		{0, 0, 220, 550}, {2, 0, 4, 10}, {2, 5, 10, 10}, {1000, 0, 1024, 2000},
	} {
		if i, r := cacheSizes(c.pods, c.pulls); i != c.intents || r != c.records {
			t.Errorf("cacheSizes(%d, %d) = %d, %d, want %d, %d", c.pods, c.pulls, i, r, c.intents, c.records)
		}
	}
	root := t.TempDir()
	_, ctx := ktesting.NewTestContext(t)
	v, err := New(ctx, Config{RootDir: root, MaxPods: 2}) // 4 intents, 10 records
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := v.RecordIntent(ctx, "registry.example/app:"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(v.metrics.memIntents); got != 75 {
		t.Errorf("intents cache usage %v%%, want 75", got)
	}
	v.RecordPulled(ctx, "registry.example/app:a", "sha256:a", nil)
	if got := testutil.ToFloat64(v.metrics.memRecords); got != 10 {
		t.Errorf("records cache usage %v%%, want 10", got)
	}
	if got := testutil.ToFloat64(v.metrics.memIntents); got != 50 {
		t.Errorf("intents cache usage %v%% after a pull ended, want 50", got)
	}
}

// TestCacheOverflow: records beyond the cache's size are still found,
// on disk, once the cache has dropped entries for room.
func TestCacheOverflow(t *testing.T) {
	root := t.TempDir()
	_, ctx := ktesting.NewTestContext(t)
	v, err := New(ctx, Config{RootDir: root, MaxPods: 1}) // 5 records
	if err != nil {
		t.Fatal(err)
	}
	secret := []kubeletv1beta1.ImagePullSecret{secretA}
	for i := range 8 {
		ref := "sha256:" + string(rune('a'+i))
		v.RecordPulled(ctx, "registry.example/app:1", ref, &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: secret})
	}
	if v.store.records.authoritative {
		t.Fatal("the records cache is authoritative after dropping entries")
	}
	// A second Verifier over the same files starts non-authoritative: 8
	// records do not fit in 5.
	v2, err := New(ctx, Config{RootDir: root, MaxPods: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, vv := range []*Verifier{v, v2} {
		for i := range 8 {
			ref := "sha256:" + string(rune('a'+i))
			if vv.MustPull(ctx, "registry.example/app:1", ref, podCreds(secret, nil)) {
				t.Errorf("record of %s not found", ref)
			}
			if !vv.MustPull(ctx, "registry.example/app:1", ref, nil) {
				t.Errorf("record of %s lets a pod without the secret in", ref)
			}
		}
	}
}
