package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// goroutineReader reads an agent's goroutine count from its
// /debug/pprof/goroutine?debug=1, which both agents serve with their
// profiling handler on (the default), as the control plane's admin: the
// agents authenticate the client certificate against the cluster CA and
// authorize it with a SubjectAccessReview.
type goroutineReader struct{ client *http.Client }

func newGoroutineReader(admin *rest.Config) (*goroutineReader, error) {
	cfg := rest.CopyConfig(admin)
	// The agents serve with certificates of their own making, signed by no
	// CA the bench knows: the address is the bench's own child on loopback
	// or its own bridge.
	cfg.Insecure = true
	cfg.CAFile, cfg.CAData = "", nil
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	c.Timeout = 10 * time.Second
	return &goroutineReader{client: c}, nil
}

// count is the agent's number of goroutines, or -1 when it serves none
// (the ideal agent) or the read fails (logged).
func (g *goroutineReader) count(ctx context.Context, a *agentProc) int {
	if a.serving == "" {
		return -1
	}
	n, err := g.read(ctx, a.serving+"/debug/pprof/goroutine?debug=1")
	if err != nil {
		logf("%s: goroutines: %v", a.name, err)
		return -1
	}
	return n
}

func (g *goroutineReader) read(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseGoroutineTotal(bufio.NewReader(resp.Body))
}

// parseGoroutineTotal reads the first line of a debug=1 goroutine profile,
// "goroutine profile: total N".
func parseGoroutineTotal(r *bufio.Reader) (int, error) {
	line, err := r.ReadString('\n')
	if err != nil && line == "" {
		return 0, fmt.Errorf("goroutine profile: %w", err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(line), "goroutine profile: total ")
	if !ok {
		return 0, fmt.Errorf("goroutine profile starts with %q, want \"goroutine profile: total N\"", line)
	}
	return strconv.Atoi(v)
}
