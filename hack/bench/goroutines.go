package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
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
	// No client timeout: a CPU profile takes its seconds; the callers'
	// contexts bound each request.
	return &goroutineReader{client: c}, nil
}

// count is the agent's number of goroutines, or -1 when it serves none
// (the ideal agent) or the read fails (logged).
func (g *goroutineReader) count(ctx context.Context, a *agentProc) int {
	if a.serving == "" {
		return -1
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := g.read(ctx, a.serving+"/debug/pprof/goroutine?debug=1")
	if err != nil {
		logf("%s: goroutines: %v", a.name, err)
		return -1
	}
	return n
}

func (g *goroutineReader) read(ctx context.Context, url string) (int, error) {
	body, err := g.get(ctx, url)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	return parseGoroutineTotal(bufio.NewReader(body))
}

// saveHeap writes the agent's heap profile (/debug/pprof/heap, for `go
// tool pprof`) to path; a failure is logged, the run goes on.
func (g *goroutineReader) saveHeap(ctx context.Context, a *agentProc, path string) {
	g.save(ctx, a, "/debug/pprof/heap", "heap profile", path)
}

// saveCPUProfile profiles the agent's CPU for d (/debug/pprof/profile)
// and writes the profile to path; a failure is logged.
func (g *goroutineReader) saveCPUProfile(ctx context.Context, a *agentProc, d time.Duration, path string) {
	g.save(ctx, a, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())), "CPU profile", path)
}

// saveTrace traces the agent's execution for d (/debug/pprof/trace) and
// writes the trace to path; a failure is logged.
func (g *goroutineReader) saveTrace(ctx context.Context, a *agentProc, d time.Duration, path string) {
	g.save(ctx, a, fmt.Sprintf("/debug/pprof/trace?seconds=%g", d.Seconds()), "execution trace", path)
}

func (g *goroutineReader) save(ctx context.Context, a *agentProc, url, what, path string) {
	if a.serving == "" {
		return
	}
	body, err := g.get(ctx, a.serving+url)
	if err == nil {
		var f *os.File
		if f, err = os.Create(path); err == nil {
			_, err = io.Copy(f, body)
			err = errors.Join(err, f.Close())
		}
		body.Close()
	}
	if err != nil {
		logf("%s: %s: %v", a.name, what, err)
		return
	}
	logf("%s: %s written to %s", a.name, what, path)
}

func (g *goroutineReader) get(ctx context.Context, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, nil
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
