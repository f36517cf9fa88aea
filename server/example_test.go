package server_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/server"
)

// A node API with anonymous access allowed and authorization off, its
// handler called in-process. A real agent passes x509/token
// authenticators, the SubjectAccessReview authorizer, the runtime (for
// exec, attach, port-forward and logs) and a stats provider, then calls
// Run.
func Example() {
	pods := server.PodListerFunc(func() []*v1.Pod {
		return []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}}
	})
	srv, err := server.New(server.Config{
		NodeName:       "node-1",
		AllowAnonymous: true,
		Authorizer:     server.AlwaysAllow{},
		Pods:           pods,
		HealthChecks:   []server.HealthCheck{server.NamedCheck("syncloop", func() error { return nil })},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	get := func(path string) (int, string) {
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code, strings.TrimSpace(w.Body.String())
	}
	code, body := get("/healthz")
	fmt.Println("/healthz", code, body)
	code, body = get("/pods")
	var list v1.PodList
	_ = json.Unmarshal([]byte(body), &list)
	fmt.Println("/pods", code, list.Kind, list.Items[0].Name)
	code, body = get("/stats/summary")
	fmt.Println("/stats/summary", code, body)
	// Output:
	// /healthz 200 ok
	// /pods 200 PodList web
	// /stats/summary 503 node statistics are not available: the node agent runs no stats provider
}

// Which nodes/* subresources a request is authorized against.
func ExampleRequestAttributes() {
	for _, req := range []struct{ method, path string }{
		{"GET", "/pods"}, {"GET", "/stats/summary"}, {"POST", "/exec/default/web/app"}, {"GET", "/containerLogs/default/web/app"},
	} {
		var subs []string
		attrs := server.RequestAttributes("node-1", &server.User{Name: "alice"}, httptest.NewRequest(req.method, req.path, nil))
		for _, a := range attrs {
			subs = append(subs, a.Resource+"/"+a.Subresource)
		}
		fmt.Println(req.method, req.path, "->", attrs[0].Verb, strings.Join(subs, " or "))
	}
	// Output:
	// GET /pods -> get nodes/pods or nodes/proxy
	// GET /stats/summary -> get nodes/stats
	// POST /exec/default/web/app -> create nodes/proxy
	// GET /containerLogs/default/web/app -> get nodes/proxy
}

// The agent's metrics are registered in a registry the caller owns and
// served on /metrics.
func ExampleRegisterAgentMetrics() {
	reg := prometheus.NewRegistry()
	m, err := server.RegisterAgentMetrics(reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	m.IncEviction("memory.available")
	srv, _ := server.New(server.Config{NodeName: "node-1", AllowAnonymous: true, Authorizer: server.AlwaysAllow{}, Metrics: reg})
	w := httptest.NewRecorder()
	srv.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if strings.HasPrefix(line, server.MetricEvictions+"{") {
			fmt.Println(line)
		}
	}
	// Output:
	// kubelet_evictions{eviction_signal="memory.available"} 1
}
