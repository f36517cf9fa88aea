package podconfig

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

// manifestServer serves whatever status and body the test sets last.
type manifestServer struct {
	mu     sync.Mutex
	status int
	body   string
	header http.Header // of the last request
}

func (m *manifestServer) set(status int, body string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status, m.body = status, body
}

func (m *manifestServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.header = r.Header.Clone()
	w.WriteHeader(m.status)
	_, _ = w.Write([]byte(m.body))
}

func startManifestServer(t *testing.T) (*manifestServer, string) {
	t.Helper()
	m := &manifestServer{status: http.StatusOK}
	srv := httptest.NewServer(m) // loopback only
	t.Cleanup(srv.Close)
	return m, srv.URL + "/pods"
}

const podListJSON = `{"apiVersion":"v1","kind":"PodList","items":[
 {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x:1"}]}},
 {"metadata":{"name":"b","namespace":"edge"},"spec":{"containers":[{"name":"c","image":"x:1"}]}}]}`

func TestHTTPSourcePoll(t *testing.T) {
	ctx := testContext(t)
	srv, url := startManifestServer(t)
	s := NewHTTPSource(url, "Edge-1", nil, clocktesting.NewFakeClock(testStart),
		WithHeader(http.Header{"Authorization": {"Bearer t"}}))

	srv.set(http.StatusBadGateway, "")
	if pods, err := s.Poll(ctx); err == nil || pods != nil {
		t.Fatalf("502 on first poll: %q, %v; want nil (nothing read yet) and an error", podNames(pods), err)
	}

	srv.set(http.StatusOK, manifest("web", "nginx:1"))
	pods, err := s.Poll(ctx)
	if err != nil || !slices.Equal(podNames(pods), []string{"default/web-edge-1"}) {
		t.Fatalf("one pod: %q, %v", podNames(pods), err)
	}
	web := pods[0]
	if web.Annotations[ConfigSourceAnnotation] != nodekit.SourceHTTP || web.Annotations[ConfigHashAnnotation] != string(web.UID) || len(web.Spec.Tolerations) != 0 {
		t.Errorf("web annotations %v tolerations %v: want source http, hash = UID, no toleration", web.Annotations, web.Spec.Tolerations)
	}
	if got := srv.header.Get("Authorization"); got != "Bearer t" {
		t.Errorf("Authorization header = %q, want the configured one", got)
	}

	srv.set(http.StatusOK, podListJSON)
	if pods, err = s.Poll(ctx); err != nil || !slices.Equal(podNames(pods), []string{"default/a-edge-1", "edge/b-edge-1"}) {
		t.Fatalf("pod list: %q, %v", podNames(pods), err)
	}

	for _, bad := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"server error", "oops", http.StatusInternalServerError, "500"},
		{"not found", "", http.StatusNotFound, "404"},
		{"invalid body", strings.Replace(podListJSON, `"image":"x:1"}]}}]}`, `"image":"x:1","bogus":true}]}}]}`, 1), http.StatusOK, "items[1].spec.containers[0].bogus"},
		{"not a manifest", "<html>hello</html>", http.StatusOK, "invalid pod manifest"},
	} {
		srv.set(bad.status, bad.body)
		pods, err := s.Poll(ctx)
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), url) {
			t.Errorf("%s: error %v, want one naming %q and the URL", bad.name, err, bad.want)
		}
		if !slices.Equal(podNames(pods), []string{"default/a-edge-1", "edge/b-edge-1"}) {
			t.Errorf("%s: pods %q, want the last good set kept", bad.name, podNames(pods))
		}
	}
	var me *ManifestError
	srv.set(http.StatusOK, "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {containers: [{name: c, image: x}]}\n")
	if _, err := s.Poll(ctx); !errors.As(err, &me) || !me.HasField("metadata.name") {
		t.Errorf("pod without a name: %v, want a ManifestError on metadata.name", err)
	}

	// An empty body means no pods, as upstream, and is reported.
	srv.set(http.StatusOK, "")
	if pods, err := s.Poll(ctx); err == nil || len(pods) != 0 {
		t.Errorf("empty body: %q, %v; want no pods and an error", podNames(pods), err)
	}
}

func TestHTTPSourceRun(t *testing.T) {
	srv, url := startManifestServer(t)
	srv.set(http.StatusServiceUnavailable, "starting")
	clk := clocktesting.NewFakeClock(testStart)
	onError, errs := errorsTo()
	out := runSource(t, NewHTTPSource(url, "n1", http.DefaultClient, clk, WithErrorHandler(onError)))

	// No SET until the URL has been read once.
	if err := recv(t, errs, "the first poll's error"); !strings.Contains(err.Error(), "503") {
		t.Fatalf("first poll error = %v, want 503", err)
	}
	srv.set(http.StatusOK, manifest("web", "nginx:1"))
	clk.Step(DefaultPeriod)
	u := recv(t, out, "the first SET")
	if u.Op != nodekit.SET || u.Source != nodekit.SourceHTTP || !slices.Equal(podNames(u.Pods), []string{"default/web-n1"}) {
		t.Fatalf("first update = %s %s %q", u.Op, u.Source, podNames(u.Pods))
	}

	// A failure keeps the set (no update) and is reported.
	srv.set(http.StatusOK, "kind: Pod\n")
	clk.Step(DefaultPeriod)
	if err := recv(t, errs, "the invalid body's error"); !strings.Contains(err.Error(), "apiVersion") {
		t.Fatalf("invalid body error = %v, want one naming apiVersion", err)
	}

	srv.set(http.StatusOK, podListJSON)
	clk.Step(DefaultPeriod)
	if u := recv(t, out, "the SET after a change"); !slices.Equal(podNames(u.Pods), []string{"default/a-n1", "edge/b-n1"}) {
		t.Fatalf("after the change: %q", podNames(u.Pods))
	}
}
