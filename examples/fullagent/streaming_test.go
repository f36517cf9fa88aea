package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodekit/nodekit/agenttest"
)

// TestStreamingThroughAPIServer: the agent declares
// ExtendWebSocketsToKubelet, so the API server sends kubectl's WebSocket
// v5 exec and its WebSocket-tunneled port-forward to the node unchanged;
// the agent translates them for the runtime's streaming server, which
// refuses both as they come (403). Both work through the API server as
// with kubectl v1.37: output, stdin, exit code, and a forwarded port.
func TestStreamingThroughAPIServer(t *testing.T) {
	e := startEnv(t)
	pod := simplePod("streams", v1.RestartPolicyAlways, "")
	c := &pod.Spec.Containers[0]
	c.Image, c.Command, c.Args = agenttest.AgnhostImage, nil, []string{"netexec", "--http-port=8080", "--udp-port=-1"}
	e.createPod(t, pod)
	e.waitPod(t, "streams", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	exec := func(cmd string, stdin io.Reader) (string, error) {
		req := e.client.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("streams").SubResource("exec").
			VersionedParams(&v1.PodExecOptions{Container: "app", Command: []string{"sh", "-c", cmd}, Stdin: stdin != nil, Stdout: true, Stderr: true}, scheme.ParameterCodec)
		ws, err := remotecommand.NewWebSocketExecutor(e.admin, "GET", req.URL().String())
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		err = ws.StreamWithContext(t.Context(), remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: &errOut})
		return out.String() + errOut.String(), err
	}
	if out, err := exec("echo out; echo err >&2", nil); err != nil || out != "out\nerr\n" {
		t.Fatalf("WebSocket exec: %q, %v", out, err)
	}
	out, err := exec("tr a-z A-Z; exit 3", strings.NewReader("from stdin\n"))
	if out != "FROM STDIN\n" || err == nil || !strings.Contains(err.Error(), "exit code 3") {
		t.Fatalf("WebSocket exec with stdin: %q, %v; want the upper-cased input and exit code 3", out, err)
	}

	pf := e.client.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("streams").SubResource("portforward").URL()
	dialer, err := portforward.NewSPDYOverWebsocketDialer(pf, e.admin)
	if err != nil {
		t.Fatal(err)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("port-forward over WebSocket: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("port-forward over WebSocket not ready within 30 s")
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("forwarded ports %v, %v", ports, err)
	}
	resp, err := http.Get((&url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0].Local), Path: "/hostname"}).String())
	if err != nil {
		t.Fatalf("GET through the forwarded port: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "streams" {
		t.Fatalf("GET /hostname through the forwarded port = %q, want the pod's hostname", body)
	}
}
