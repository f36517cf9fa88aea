package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// freeLoopbackPort returns a port nothing listens on at the moment.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// processListensOn reports whether this process (the test, and the agent
// running in it) holds a listening TCP socket on port, from /proc: the
// listening sockets of the network namespace on that port, matched by
// inode against this process's descriptors.
func processListensOn(t *testing.T, port int) bool {
	t.Helper()
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
				inodes[fields[9]] = true
			}
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") && inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			return true
		}
	}
	return false
}

// adminTLS is a TLS client configuration with the admin's client
// certificate (accepted by the node API through clientCAFile) that trusts
// any serving certificate (the node's is self-signed).
func (e *env) adminTLS(t *testing.T) *tls.Config {
	t.Helper()
	c, err := rest.TLSConfigFor(rest.CopyConfig(e.admin))
	if err != nil {
		t.Fatal(err)
	}
	c = c.Clone()
	c.InsecureSkipVerify, c.RootCAs, c.ServerName = true, nil, ""
	return c
}

// nodeAPIGet GETs path from the node API with the admin's certificate.
func (e *env) nodeAPIGet(t *testing.T, c *tls.Config, path string) (int, string, error) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: c}, Timeout: 10 * time.Second}
	resp, err := client.Get("https://" + net.JoinHostPort(e.nodeIP, "10250") + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// The node API obeys its KubeletConfiguration: debugging handlers off
// refuse exec and logs with upstream's 405, tlsMinVersion VersionTLS13
// refuses a TLS 1.2 client, and the local healthz endpoint answers "ok" on
// healthzBindAddress:healthzPort.
func TestNodeAPISettings(t *testing.T) {
	healthzPort := freeLoopbackPort(t)
	e := startEnv(t, envOption{config: fmt.Sprintf("enableDebuggingHandlers: false\ntlsMinVersion: VersionTLS13\nhealthzBindAddress: 127.0.0.1\nhealthzPort: %d\n", healthzPort)})
	ctx := t.Context()
	e.createPod(t, simplePod("idle", v1.RestartPolicyAlways, "echo started; sleep 3600"))
	e.waitPod(t, "idle", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })

	tls13 := e.adminTLS(t)
	tls13.MinVersion = tls.VersionTLS13
	var code int
	var body string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		var err error
		code, body, err = e.nodeAPIGet(t, tls13, "/healthz")
		return err == nil, nil
	})
	if err != nil || code != 200 || body != "ok" {
		t.Fatalf("node API /healthz over TLS 1.3: %d %q %v", code, body, err)
	}

	tls12 := e.adminTLS(t)
	tls12.MaxVersion = tls.VersionTLS12
	if conn, err := tls.Dial("tcp", net.JoinHostPort(e.nodeIP, "10250"), tls12); err == nil {
		conn.Close()
		t.Fatal("a TLS 1.2-only client was accepted under tlsMinVersion: VersionTLS13")
	} else {
		t.Logf("TLS 1.2 client refused: %v", err)
	}

	// exec, as the API server asks for it (an upgrade): 405, upstream's
	// "Debug endpoints are disabled.".
	conn, err := tls.Dial("tcp", net.JoinHostPort(e.nodeIP, "10250"), tls13)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /exec/default/idle/app?command=true&output=1 HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n", e.nodeIP)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusMethodNotAllowed || string(b) != "Debug endpoints are disabled.\n" {
		t.Fatalf("exec with enableDebuggingHandlers: false: %d %q", resp.StatusCode, b)
	}
	for path, want := range map[string]int{"/containerLogs/default/idle/app": 405, "/runningpods/": 405, "/configz": 404, "/pods": 200} {
		if code, body, err := e.nodeAPIGet(t, tls13, path); err != nil || code != want {
			t.Errorf("%s: %d %.100q %v, want %d", path, code, body, err, want)
		}
	}
	// kubectl logs goes API server -> node API, and is refused the same
	// way: the API server relays the 405 (MethodNotAllowed).
	if out, err := e.client.CoreV1().Pods("default").GetLogs("idle", &v1.PodLogOptions{Container: "app"}).DoRaw(ctx); !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("kubectl logs with debugging handlers off: %q %v, want MethodNotAllowed", out, err)
	}

	// The local healthz endpoint: plain HTTP, no credentials, "ok".
	hresp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(healthzPort) + "/healthz")
	if err != nil {
		t.Fatalf("healthz on 127.0.0.1:%d: %v", healthzPort, err)
	}
	b, _ = io.ReadAll(hresp.Body)
	hresp.Body.Close()
	if hresp.StatusCode != 200 || string(b) != "ok" {
		t.Fatalf("healthz on 127.0.0.1:%d: %d %q", healthzPort, hresp.StatusCode, b)
	}
	if !processListensOn(t, healthzPort) {
		t.Fatalf("processListensOn(%d) = false while the agent serves healthz there", healthzPort)
	}
}

// enableServer: false serves no secure port (the read-only one still is,
// when set) and healthzPort: 0 no health endpoint.
func TestNodeAPIDisabled(t *testing.T) {
	ro := freeLoopbackPort(t)
	e := startEnv(t, envOption{config: fmt.Sprintf("enableServer: false\nhealthzPort: 0\nreadOnlyPort: %d\n", ro)})
	ctx := t.Context()
	url := "http://" + net.JoinHostPort(e.nodeIP, strconv.Itoa(ro)) + "/pods"
	var code int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		code = resp.StatusCode
		return true, nil
	})
	if err != nil || code != 200 {
		t.Fatalf("read-only /pods without credentials: %d %v", code, err)
	}
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort(e.nodeIP, "10250"), 5*time.Second); err == nil {
		conn.Close()
		t.Fatal("the secure port listens with enableServer: false")
	}
	if processListensOn(t, 10248) {
		t.Fatal("the agent listens on the healthz port with healthzPort: 0")
	}
	if !processListensOn(t, ro) {
		t.Fatalf("processListensOn(%d) = false while the read-only port is served", ro)
	}
}
