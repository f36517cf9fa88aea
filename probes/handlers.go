package probes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	remote "k8s.io/cri-client/pkg"

	"github.com/nodekit/nodekit"
)

// User agents of probes and hooks, as upstream's for this Kubernetes minor.
const (
	probeUserAgent = "kube-probe/1.37"
	hookUserAgent  = "kube-lifecycle/1.37"
)

// maxOutput bounds what a handler keeps of a command's output or a response
// body (upstream's 10 KiB).
const maxOutput = 10 << 10

// outcome is what one handler run says, before thresholds.
type outcome int

const (
	outSuccess outcome = iota
	// outWarning is a success with something worth an event (an unfollowed
	// redirect).
	outWarning
	outFailure
	// outUnknown is neither: the handler could not run (bad port name,
	// runtime error). It comes with an error.
	outUnknown
)

func (o outcome) String() string {
	switch o {
	case outSuccess:
		return "success"
	case outWarning:
		return "warning"
	case outFailure:
		return "failure"
	}
	return "unknown"
}

// resolvePort returns the port number p names: a number, or the name of one
// of c's ports.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	var port int
	switch p.Type {
	case intstr.Int:
		port = p.IntValue()
	case intstr.String:
		found := false
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				port, found = int(cp.ContainerPort), true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("port %q not found", p.StrVal)
		}
	default:
		return 0, fmt.Errorf("port %v is neither a number nor a name", p)
	}
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("invalid port number: %d", port)
	}
	return port, nil
}

// newHTTPRequest builds the GET request of an httpGet action: scheme (http
// by default), host (podIP by default), port by number or name, path and
// headers. A Host header sets the request's host; User-Agent and Accept get
// upstream's defaults unless given (an empty Accept removes it).
func newHTTPRequest(ctx context.Context, a *v1.HTTPGetAction, c *v1.Container, podIP, agent string) (*http.Request, error) {
	scheme := strings.ToLower(string(a.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := a.Host
	if host == "" {
		host = podIP
	}
	port, err := resolvePort(a.Port, c)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(a.Path)
	if err != nil {
		// Too late to reject the pod; send the path as written.
		u = &url.URL{Path: a.Path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	for _, hv := range a.HTTPHeaders {
		h.Add(hv.Name, hv.Value)
	}
	if _, ok := h["User-Agent"]; !ok {
		h.Set("User-Agent", agent)
	}
	if _, ok := h["Accept"]; !ok {
		h.Set("Accept", "*/*")
	} else if h.Get("Accept") == "" {
		h.Del("Accept")
	}
	req.Header = h
	req.Host = h.Get("Host")
	return req, nil
}

// maxRedirects is how many same-host redirects a probe or hook follows, the
// limit net/http's default policy has too.
const maxRedirects = 10

// sameHostRedirects is the CheckRedirect policy of probe and hook clients.
// via holds the requests sent so far, oldest first, so via[0] is the one
// the probe addressed. A hop to any other host is not taken: the 3xx that
// asked for it becomes the response (http.ErrUseLastResponse), which
// judgeResponse turns into a warning. Hops that stay on the host are taken
// until maxRedirects have been.
func sameHostRedirects(next *http.Request, via []*http.Request) error {
	if origin := via[0].URL.Hostname(); next.URL.Hostname() != origin {
		return http.ErrUseLastResponse
	}
	if len(via) < maxRedirects {
		return nil
	}
	return fmt.Errorf("stopped after %d redirects", maxRedirects)
}

// newTransport is the transport of probes and hooks: no proxy, no keep-alive
// (a probe is one request), no compression, certificates not verified (the
// agent has nothing to verify them against), connections through d.
func newTransport(d Dialer) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
		TLSHandshakeTimeout: 10 * time.Second,
		DisableKeepAlives:   true,
		DisableCompression:  true,
		ForceAttemptHTTP2:   true,
	}
}

// checkHTTP sends req and judges the response (judgeResponse). Transport
// errors, timeouts and an unreadable body fail the probe.
func checkHTTP(tr http.RoundTripper, req *http.Request, timeout time.Duration) (outcome, string) {
	client := &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: sameHostRedirects}
	resp, err := client.Do(req)
	if err != nil {
		return outFailure, err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
	if err != nil {
		return outFailure, fmt.Sprintf("reading the response of %s: %v", req.URL, err)
	}
	return judgeResponse(resp.StatusCode, body)
}

// judgeResponse is the verdict on a response that arrived: a 2xx succeeds
// with the body as its output; a 3xx is a redirect sameHostRedirects did
// not take, a success worth a warning event; every other code fails. A
// failure's message leaves the body out, since it may hold secrets and
// ends up in events (upstream issue 99425).
func judgeResponse(code int, body []byte) (outcome, string) {
	switch code / 100 {
	case 2:
		return outSuccess, string(body)
	case 3:
		return outWarning, "Probe terminated redirects, Response body: " + string(body)
	default:
		return outFailure, fmt.Sprintf("HTTP probe failed with statuscode: %d", code)
	}
}

// checkTCP succeeds when a connection to addr opens within timeout.
func checkTCP(ctx context.Context, d Dialer, addr string, timeout time.Duration) (outcome, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return outFailure, err.Error()
	}
	_ = conn.Close()
	return outSuccess, ""
}

// checkGRPC calls grpc.health.v1.Health/Check on addr for service; SERVING
// succeeds, anything else (including a server without the health service)
// fails. As upstream, a server that refuses connections fails only when the
// timeout is over (the client keeps trying to connect until then).
func checkGRPC(ctx context.Context, d Dialer, addr, service string, timeout time.Duration) (outcome, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(probeUserAgent),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", a)
		}),
	)
	if err != nil {
		return outFailure, fmt.Sprintf("error: failed to connect service at %q: %v", addr, err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
	if err != nil {
		st, _ := status.FromError(err)
		switch st.Code() {
		case codes.Unimplemented:
			return outFailure, fmt.Sprintf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", st.Message())
		case codes.DeadlineExceeded:
			if conn.GetState() != connectivity.Ready {
				return outFailure, fmt.Sprintf("timeout: failed to connect service %q within %v", addr, timeout)
			}
			return outFailure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout)
		}
		return outFailure, fmt.Sprintf("error: health rpc probe failed: %v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return outFailure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String())
	}
	return outSuccess, "service healthy"
}

// checkExec runs cmd in the container: exit 0 succeeds, any other exit
// fails with the output, a timeout fails, and an error from the runtime is
// unknown.
func checkExec(ctx context.Context, e Execer, id nodekit.ContainerID, cmd []string, timeout time.Duration) (outcome, string, error) {
	if e == nil {
		return outUnknown, "", errors.New("exec probes need an Execer, and none is configured")
	}
	stdout, stderr, code, err := e.ExecSync(ctx, id, cmd, timeout)
	if err != nil {
		if isTimeout(err) {
			return outFailure, fmt.Sprintf("command timed out: %q timed out after %v", strings.Join(cmd, " "), timeout), nil
		}
		return outUnknown, "", err
	}
	out := combined(stdout, stderr)
	if code != 0 {
		return outFailure, out, nil
	}
	return outSuccess, out, nil
}

// combined is stdout then stderr, bounded as upstream.
func combined(stdout, stderr []byte) string {
	b := append(append([]byte{}, stdout...), stderr...)
	if len(b) > maxOutput {
		b = b[:maxOutput]
	}
	return string(b)
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, remote.ErrCommandTimedOut) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// expandStatic replaces $(NAME) in each argument with the value of the
// container's env entry NAME, as upstream does for exec probes: only plain
// values are known (valueFrom entries expand to ""), "$$" is a literal "$",
// and unknown names stay as written.
func expandStatic(args []string, env []v1.EnvVar) []string {
	if len(args) == 0 {
		return nil
	}
	vals := make(map[string]string, len(env))
	for _, e := range env {
		vals[e.Name] = e.Value
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expandOne(a, vals)
	}
	return out
}

func expandOne(s string, vals map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vals[name]; ok && name != "" {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
