package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/streamtranslate"
)

// Streamer asks the container runtime's streaming server for exec, attach
// and port-forward sessions (CRI Exec, Attach, PortForward) and returns
// the URL that serves each; the server proxies the caller's upgraded
// connection (SPDY or WebSocket) there. criruntime.Runtime satisfies it.
// Each call blocks only for the CRI round trip.
type Streamer interface {
	Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*url.URL, error)
	Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*url.URL, error)
	PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*url.URL, error)
}

// streamOptions are the exec/attach query's stream choices.
type streamOptions struct {
	stdin, stdout, stderr, tty bool
}

// parseStreamOptions reads input, output, error and tty ("1" or "true"),
// as the API server sends them. TTY merges stderr into stdout.
func parseStreamOptions(q url.Values) (streamOptions, error) {
	on := func(name string) bool {
		v := q.Get(name)
		return v == "1" || strings.EqualFold(v, "true")
	}
	o := streamOptions{stdin: on(v1.ExecStdinParam), stdout: on(v1.ExecStdoutParam), stderr: on(v1.ExecStderrParam), tty: on(v1.ExecTTYParam)}
	if o.tty && o.stderr {
		o.stderr = false
	}
	if !o.stdin && !o.stdout && !o.stderr {
		return o, errors.New("you must specify at least 1 of stdin, stdout, stderr")
	}
	return o, nil
}

// parsePorts reads the port query parameter (repeated or comma-separated),
// which WebSocket port-forward requests must carry.
func parsePorts(q url.Values) ([]int32, error) {
	var ports []int32
	for _, v := range q[v1.PortHeader] {
		for _, s := range strings.Split(v, ",") {
			p, err := strconv.ParseUint(strings.TrimSpace(s), 10, 16)
			if err != nil || p == 0 {
				return nil, fmt.Errorf("unable to parse %q as a port", s)
			}
			ports = append(ports, int32(p))
		}
	}
	if len(ports) == 0 {
		return nil, errors.New("query parameter \"port\" is required")
	}
	return ports, nil
}

// httpError is an error with the status code it is answered with.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func notFound(format string, args ...any) error {
	return &httpError{code: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

// writeError answers err with its status code: an httpError's, else one
// derived from a gRPC status (NotFound 404, InvalidArgument 400,
// Unavailable 503, Unimplemented 501), else 500.
func writeError(w http.ResponseWriter, err error) {
	var he *httpError
	if errors.As(err, &he) {
		http.Error(w, he.msg, he.code)
		return
	}
	code := http.StatusInternalServerError
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.NotFound:
			code = http.StatusNotFound
		case codes.InvalidArgument:
			code = http.StatusBadRequest
		case codes.Unavailable:
			code = http.StatusServiceUnavailable
		case codes.Unimplemented:
			code = http.StatusNotImplemented
		}
	}
	http.Error(w, err.Error(), code)
}

// streamTarget finds the agent's pod of a streaming request and, in the
// runtime, the pod's running instance.
func (s *Server) streamTarget(ctx context.Context, r *http.Request) (*v1.Pod, *nodekit.Pod, error) {
	if s.cfg.Streaming == nil || s.cfg.Runtime == nil {
		return nil, nil, &httpError{code: http.StatusNotImplemented, msg: "streaming (exec, attach, port-forward) is not available on this node"}
	}
	ns, name, uid := r.PathValue("namespace"), r.PathValue("pod"), types.UID(r.PathValue("uid"))
	pod, ok := s.findPod(ns, name)
	if !ok || !podMatchesUID(pod, uid) {
		return nil, nil, notFound("pod does not exist")
	}
	running, err := s.cfg.Runtime.ListPods(ctx, false)
	if err != nil {
		return nil, nil, fmt.Errorf("list running pods: %w", err)
	}
	for _, rp := range running {
		if rp.ID == pod.UID {
			return pod, rp, nil
		}
	}
	return nil, nil, notFound("pod %q is not running", name)
}

// runningContainer returns the ID of the named running container of rp.
func runningContainer(rp *nodekit.Pod, podName, container string) (string, error) {
	for _, c := range rp.Containers {
		if c.Name == container && c.State == nodekit.StateRunning {
			return c.ID.ID, nil
		}
	}
	return "", notFound("container not found (%q) in pod %q", container, podName)
}

// exec serves GET and POST /exec/{namespace}/{pod}[/{uid}]/{container}.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	opts, err := parseStreamOptions(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := r.URL.Query()[v1.ExecCommandParam]
	if len(cmd) == 0 {
		http.Error(w, "no command given (query parameter \"command\")", http.StatusBadRequest)
		return
	}
	if !isUpgrade(r) {
		http.Error(w, "Upgrade request required", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	pod, rp, err := s.streamTarget(ctx, r)
	if err != nil {
		writeError(w, err)
		return
	}
	id, err := runningContainer(rp, pod.Name, r.PathValue("container"))
	if err != nil {
		writeError(w, err)
		return
	}
	u, err := s.cfg.Streaming.Exec(ctx, &runtimeapi.ExecRequest{
		ContainerId: id, Cmd: cmd, Tty: opts.tty, Stdin: opts.stdin, Stdout: opts.stdout, Stderr: opts.stderr,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	s.serveStream(w, r, u, opts)
}

// serveStream connects an exec or attach caller to the runtime's
// streaming server at u: a WebSocket v5 (stream-close) caller through a
// WebSocket-to-SPDY translation when Config.TranslateWebSockets is on (the
// runtimes' streaming servers speak SPDY and older WebSocket protocols
// only, as upstream's ExtendWebSocketsToKubelet), anything else proxied
// as it is. A translated session's WebSocket closes after
// StreamingIdleTimeout without a frame either way (4 hours, upstream's
// fixed limit, when it is 0).
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, u *url.URL, opts streamOptions) {
	if s.cfg.TranslateWebSockets && wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		t := &streamtranslate.Translator{Location: u, Options: streamtranslate.Options{
			Stdin: opts.stdin, Stdout: opts.stdout, Stderr: opts.stderr, TTY: opts.tty,
		}, IdleTimeout: s.cfg.StreamingIdleTimeout}
		t.ServeHTTP(w, r)
		return
	}
	proxyUpgrade(w, r, u, s.cfg.StreamingIdleTimeout, s.clock)
}

// attach serves GET and POST /attach/{namespace}/{pod}[/{uid}]/{container}.
// The TTY setting comes from the container's spec, as it was started.
func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	opts, err := parseStreamOptions(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !isUpgrade(r) {
		http.Error(w, "Upgrade request required", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	pod, rp, err := s.streamTarget(ctx, r)
	if err != nil {
		writeError(w, err)
		return
	}
	name := r.PathValue("container")
	spec := containerSpec(pod, name)
	if spec == nil {
		writeError(w, notFound("container %s not found in pod %s", name, pod.Name))
		return
	}
	id, err := runningContainer(rp, pod.Name, name)
	if err != nil {
		writeError(w, err)
		return
	}
	u, err := s.cfg.Streaming.Attach(ctx, &runtimeapi.AttachRequest{
		ContainerId: id, Tty: spec.TTY, Stdin: opts.stdin, Stdout: opts.stdout, Stderr: opts.stderr && !spec.TTY,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	opts.tty, opts.stderr = spec.TTY, opts.stderr && !spec.TTY
	s.serveStream(w, r, u, opts)
}

// portForward serves GET and POST /portForward/{namespace}/{pod}[/{uid}].
// SPDY clients choose ports per stream; WebSocket clients name them in the
// query, except those of the tunneling protocol (SPDY inside a WebSocket),
// which with Config.TranslateWebSockets are unwrapped and proxied as SPDY.
func (s *Server) portForward(w http.ResponseWriter, r *http.Request) {
	if !isUpgrade(r) {
		http.Error(w, "Upgrade request required", http.StatusBadRequest)
		return
	}
	tunnel := s.cfg.TranslateWebSockets && wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	var ports []int32
	if isWebSocket(r) && !tunnel {
		var err error
		if ports, err = parsePorts(r.URL.Query()); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	ctx := r.Context()
	_, rp, err := s.streamTarget(ctx, r)
	if err != nil {
		writeError(w, err)
		return
	}
	if len(rp.Sandboxes) == 0 {
		writeError(w, notFound("pod %q has no ready sandbox", rp.Name))
		return
	}
	u, err := s.cfg.Streaming.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: rp.Sandboxes[0].ID.ID, Port: ports})
	if err != nil {
		writeError(w, err)
		return
	}
	if tunnel {
		t := &streamtranslate.Tunnel{Upgrade: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			proxyUpgrade(w, r, u, s.cfg.StreamingIdleTimeout, s.clock)
		})}
		t.ServeHTTP(w, r)
		return
	}
	proxyUpgrade(w, r, u, s.cfg.StreamingIdleTimeout, s.clock)
}

func containerSpec(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
			return &c
		}
	}
	return nil
}
