package credentialprovider

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// upstreamHash is kubelet's hash of a configuration read from files, in
// order: SHA-256 over each file's length (uint64, big-endian) and content.
func upstreamHash(t *testing.T, files ...string) string {
	t.Helper()
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	return fmt.Sprintf("sha256:%x", h.Sum(nil))
}

// histogram is the plugin's duration histogram as registered in reg.
func histogram(t *testing.T, reg *prometheus.Registry, plugin string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kubelet_credential_provider_plugin_duration" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "plugin_name" && l.GetValue() == plugin {
					return m.GetHistogram()
				}
			}
		}
	}
	return nil
}

// Every run of a provider's binary is observed in
// kubelet_credential_provider_plugin_duration{plugin_name} (with
// upstream's default buckets); a run that fails (exit status) also counts
// in _errors_total, a response that does not decode does not (upstream
// counts the exec only); an answer from the cache runs nothing and
// observes nothing. The config's hash is the info metric's label.
func TestKeyringMetrics(t *testing.T) {
	ctx := t.Context()
	t.Run("runs and errors", func(t *testing.T) {
		kr, _, log := setup(t, `"*.example.com"`, `"-cache-key-type=Registry"`)
		reg := prometheus.NewRegistry()
		if err := kr.RegisterMetrics(reg); err != nil {
			t.Fatal(err)
		}
		wantAlice(t, kr.Lookup(ctx, "a.example.com/one", pod))
		wantAlice(t, kr.Lookup(ctx, "a.example.com/two", pod)) // the registry's cache entry
		if got := calls(t, log); len(got) != 1 {
			t.Fatalf("plugin calls %v, want one", got)
		}
		h := histogram(t, reg, "credprovtest")
		if h == nil || h.GetSampleCount() != 1 {
			t.Fatalf("duration histogram %v, want one observation", h)
		}
		var bounds []float64
		for _, b := range h.GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		if fmt.Sprint(bounds) != fmt.Sprint(prometheus.DefBuckets) {
			t.Errorf("buckets %v, want upstream's metrics.DefBuckets %v", bounds, prometheus.DefBuckets)
		}
		if got := testutil.ToFloat64(kr.metrics.errors.WithLabelValues("credprovtest")); got != 0 {
			t.Errorf("errors %v after a good run, want 0", got)
		}
	})
	for _, tc := range []struct {
		name, args string
		errors     float64
	}{
		{"exit status", `"-fail=no credentials today"`, 2},
		{"wrong apiVersion is no exec error", `"-api-version=credentialprovider.kubelet.k8s.io/v1beta1"`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kr, _, _ := setup(t, `"*.example.com"`, tc.args)
			reg := prometheus.NewRegistry()
			if err := kr.RegisterMetrics(reg); err != nil {
				t.Fatal(err)
			}
			kr.Lookup(ctx, "a.example.com/one", pod)
			kr.Lookup(ctx, "a.example.com/one", pod) // failures are not cached
			if h := histogram(t, reg, "credprovtest"); h == nil || h.GetSampleCount() != 2 {
				t.Errorf("duration histogram %v, want two observations", h)
			}
			if got := testutil.ToFloat64(kr.metrics.errors.WithLabelValues("credprovtest")); got != tc.errors {
				t.Errorf("errors_total %v, want %v", got, tc.errors)
			}
		})
	}
	t.Run("real clock and config info", func(t *testing.T) {
		bin := testPlugin(t)
		dir := t.TempDir()
		conf := filepath.Join(dir, "conf.d")
		if err := os.Mkdir(conf, 0o755); err != nil {
			t.Fatal(err)
		}
		a, b := filepath.Join(conf, "10-a.yaml"), filepath.Join(conf, "20-b.yaml")
		writeFile(t, a, header+"providers:\n- name: credprovtest\n  matchImages: [\"*.example.com\"]\n  defaultCacheDuration: 1m\n"+
			"  apiVersion: credentialprovider.kubelet.k8s.io/v1\n")
		writeFile(t, b, header+"providers: []\n")
		kr, err := Load(Config{ConfigPath: conf, BinDir: bin})
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		if err := kr.RegisterMetrics(reg); err != nil {
			t.Fatal(err)
		}
		want := upstreamHash(t, a, b)
		if kr.ConfigHash() != want {
			t.Errorf("ConfigHash %q, want %q", kr.ConfigHash(), want)
		}
		info := fmt.Sprintf("# HELP kubelet_credential_provider_config_info [ALPHA] Information about the last applied credential provider configuration with hash as label\n"+
			"# TYPE kubelet_credential_provider_config_info gauge\nkubelet_credential_provider_config_info{hash=%q} 1\n", want)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(info), "kubelet_credential_provider_config_info"); err != nil {
			t.Error(err)
		}
		kr.Lookup(ctx, "a.example.com/one", pod)
		if h := histogram(t, reg, "credprovtest"); h == nil || h.GetSampleCount() != 1 || h.GetSampleSum() <= 0 {
			t.Errorf("duration histogram %v, want one observation of the run's time", h)
		}
	})
}
