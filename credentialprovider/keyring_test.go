package credentialprovider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/agenttest"
)

// pluginDir holds the test plugin, built once for the package's tests.
var pluginDir struct {
	once sync.Once
	dir  string
}

// testPlugin builds agenttest/credprovtest once and returns a bin dir
// holding it under name "credprovtest".
func testPlugin(t *testing.T) string {
	t.Helper()
	pluginDir.once.Do(func() {
		dir, err := os.MkdirTemp("", "credprov-bin-")
		if err != nil {
			t.Fatal(err)
		}
		agenttest.BuildCredentialProvider(t, dir, "credprovtest")
		pluginDir.dir = dir
	})
	if _, err := os.Stat(filepath.Join(pluginDir.dir, "credprovtest")); err != nil {
		t.Fatalf("test plugin not built: %v", err)
	}
	return pluginDir.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pluginDir.dir != "" {
		_ = os.RemoveAll(pluginDir.dir)
	}
	os.Exit(code)
}

// setup writes a config of one provider "credprovtest" with args and
// returns the keyring, its fake clock and the plugin's call log.
func setup(t *testing.T, matchImages, args string) (*Keyring, *clocktesting.FakePassiveClock, string) {
	t.Helper()
	return setupSA(t, matchImages, args, "", nil)
}

// setupSA is setup with tokenAttributes (YAML lines under it) served by sas.
func setupSA(t *testing.T, matchImages, args, tokenAttributes string, sas ServiceAccounts) (*Keyring, *clocktesting.FakePassiveClock, string) {
	t.Helper()
	bin := testPlugin(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	cfg := header + "providers:\n- name: credprovtest\n  matchImages: [" + matchImages + "]\n  defaultCacheDuration: 10m\n" +
		"  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  args: [" + args + "]\n" +
		"  env:\n  - name: CREDPROVTEST_USERNAME\n    value: alice\n  - name: CREDPROVTEST_PASSWORD\n    value: s3cret\n" +
		"  - name: CREDPROVTEST_LOG\n    value: " + log + "\n"
	if tokenAttributes != "" {
		cfg += "  tokenAttributes:\n" + tokenAttributes
	}
	path := filepath.Join(dir, "config.yaml")
	writeFile(t, path, cfg)
	clk := clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))
	kr, err := Load(Config{ConfigPath: path, BinDir: bin, ServiceAccountTokens: true, Clock: clk, Environ: func() []string { return nil }, ServiceAccounts: sas})
	if err != nil {
		t.Fatal(err)
	}
	return kr, clk, log
}

// calls is the images the plugin was asked about, in order.
func calls(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

func wantAlice(t *testing.T, got []*runtimeapi.AuthConfig) {
	t.Helper()
	if len(got) != 1 || got[0].Username != "alice" || got[0].Password != "s3cret" {
		t.Fatalf("credentials %v, want alice's", got)
	}
}

var pod = &v1.Pod{}

func TestKeyringCacheKeys(t *testing.T) {
	ctx := t.Context()
	t.Run("Registry", func(t *testing.T) {
		kr, clk, log := setup(t, `"*.example.com"`, `"-cache-key-type=Registry"`)
		wantAlice(t, kr.Lookup(ctx, "a.example.com/team/one", pod))
		wantAlice(t, kr.Lookup(ctx, "a.example.com/team/two", pod))
		if got := calls(t, log); len(got) != 1 {
			t.Errorf("plugin calls %v, want one for the registry", got)
		}
		wantAlice(t, kr.Lookup(ctx, "b.example.com/team/one", pod))
		if got := calls(t, log); len(got) != 2 {
			t.Errorf("plugin calls %v, want a second for another registry", got)
		}
		clk.SetTime(clk.Now().Add(10*time.Minute + time.Second)) // past defaultCacheDuration
		wantAlice(t, kr.Lookup(ctx, "a.example.com/team/one", pod))
		if got := calls(t, log); len(got) != 3 {
			t.Errorf("plugin calls %v, want a third after the entry expired", got)
		}
	})
	t.Run("Image", func(t *testing.T) {
		kr, _, log := setup(t, `"*.example.com"`, `"-cache-key-type=Image"`)
		kr.Lookup(ctx, "a.example.com/one", pod)
		kr.Lookup(ctx, "a.example.com/one", pod)
		kr.Lookup(ctx, "a.example.com/two", pod)
		if got, want := strings.Join(calls(t, log), " "), "a.example.com/one a.example.com/two"; got != want {
			t.Errorf("plugin calls %q, want %q", got, want)
		}
	})
	t.Run("Global with the response's cacheDuration", func(t *testing.T) {
		kr, clk, log := setup(t, `"*.example.com", "*.other.io"`, `"-cache-key-type=Global", "-cache-duration=1m", "-key=*.example.com"`)
		wantAlice(t, kr.Lookup(ctx, "a.example.com/one", pod))
		// The global entry answers for the other registry too, but its
		// credentials are for *.example.com only.
		if got := kr.Lookup(ctx, "x.other.io/two", pod); len(got) != 0 {
			t.Errorf("credentials %v for a registry the answer does not name", got)
		}
		if got := calls(t, log); len(got) != 1 {
			t.Errorf("plugin calls %v, want one", got)
		}
		clk.SetTime(clk.Now().Add(time.Minute + time.Second))
		kr.Lookup(ctx, "a.example.com/one", pod)
		if got := calls(t, log); len(got) != 2 {
			t.Errorf("plugin calls %v, want a second after the response's 1m", got)
		}
	})
	t.Run("cacheDuration 0 is not cached", func(t *testing.T) {
		kr, _, log := setup(t, `"*.example.com"`, `"-cache-duration=0s"`)
		kr.Lookup(ctx, "a.example.com/one", pod)
		kr.Lookup(ctx, "a.example.com/one", pod)
		if got := calls(t, log); len(got) != 2 {
			t.Errorf("plugin calls %v, want two", got)
		}
	})
	t.Run("matchImages", func(t *testing.T) {
		kr, _, log := setup(t, `"*.example.com"`, "")
		if got := kr.Lookup(ctx, "example.com/one", pod); len(got) != 0 {
			t.Errorf("credentials %v for an image outside matchImages", got)
		}
		if got := calls(t, log); len(got) != 0 {
			t.Errorf("plugin called %v for an image outside matchImages", got)
		}
	})
}

func TestKeyringPluginFailures(t *testing.T) {
	for _, tc := range []struct{ name, args string }{
		{"exit status", `"-fail=no credentials today"`},
		{"wrong apiVersion", `"-api-version=credentialprovider.kubelet.k8s.io/v1beta1"`},
		{"bad cacheKeyType", `"-cache-key-type=Pod"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kr, _, log := setup(t, `"*.example.com"`, tc.args)
			if got := kr.Lookup(t.Context(), "a.example.com/one", pod); len(got) != 0 {
				t.Errorf("credentials %v from a failing plugin", got)
			}
			// A failure is not cached.
			kr.Lookup(t.Context(), "a.example.com/one", pod)
			if got := calls(t, log); len(got) != 2 {
				t.Errorf("plugin calls %v, want two", got)
			}
		})
	}
	t.Run("messages", func(t *testing.T) {
		for args, want := range map[string]string{
			`"-fail=no credentials today"`:                             "error execing credential provider plugin credprovtest for image a.example.com/one: exit status 1: no credentials today",
			`"-api-version=credentialprovider.kubelet.k8s.io/v1beta1"`: "apiVersion from credential plugin response did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1",
			`"-cache-key-type=Pod"`:                                    "credential provider plugin did not return a valid cacheKeyType: Pod",
		} {
			kr, _, _ := setup(t, `"*.example.com"`, args)
			_, _, err := kr.providers[0].provide(t.Context(), "a.example.com/one", pod)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("args %s: error %v, want %q", args, err, want)
			}
		}
	})
}

// TestKeyringCollapsesConcurrentRequests holds the plugin's first run
// (blocked on a FIFO) until seven more requests for the image have joined it: one run answers
// all eight.
func TestKeyringCollapsesConcurrentRequests(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	if err := syscall.Mkfifo(release, 0o600); err != nil {
		t.Fatal(err)
	}
	kr, _, log := setup(t, `"*.example.com"`, `"-cache-duration=0s", "-wait-for=`+release+`"`)
	p := kr.providers[0]
	results := make(chan []*runtimeapi.AuthConfig, 8)
	lookup := func() { results <- kr.Lookup(t.Context(), "a.example.com/one", pod) }
	go lookup()
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	poll("the first run", func() bool { return len(calls(t, log)) == 1 })
	for range 7 {
		go lookup()
	}
	poll("seven waiters", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		f := p.inflight["a.example.com/one"]
		return f != nil && f.waiters == 7
	})
	// The plugin is blocked opening the FIFO; opening its other end
	// releases it.
	f, err := os.OpenFile(release, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	for range 8 {
		wantAlice(t, <-results)
	}
	if got := calls(t, log); len(got) != 1 {
		t.Errorf("plugin calls %v, want one for eight concurrent requests", got)
	}
}

func TestLoadErrors(t *testing.T) {
	bin := testPlugin(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	writeFile(t, cfg, header+"providers:\n"+providerYAML("absent"))
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no bin dir", Config{ConfigPath: cfg, BinDir: filepath.Join(dir, "nope")}, "plugin binary directory " + filepath.Join(dir, "nope") + " did not exist"},
		{"no config", Config{BinDir: bin}, "credential provider config path is empty"},
		{"no binary", Config{ConfigPath: cfg, BinDir: bin}, "plugin binary executable " + filepath.Join(bin, "absent") + " did not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Load(tc.cfg); err == nil || err.Error() != tc.want {
				t.Errorf("Load: %v, want %q", err, tc.want)
			}
		})
	}
	writeFile(t, cfg, header+"providers:\n- name: x\n  matchImages: []\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n")
	_, err := Load(Config{ConfigPath: cfg, BinDir: bin})
	if err == nil || !strings.HasPrefix(err.Error(), "failed to validate credential provider config: ") || !strings.Contains(err.Error(), "providers.defaultCacheDuration: Required value") {
		t.Errorf("Load of an invalid config: %v", err)
	}
}
