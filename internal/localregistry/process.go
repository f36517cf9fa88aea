package localregistry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodekit/nodekit/internal/localcp"
)

const (
	stopGrace   = 10 * time.Second
	killWait    = 10 * time.Second
	tailLines   = 30
	tailMaxRead = 16 << 10
)

// registryConfig renders config.yml: filesystem storage under dir/data,
// TLS with sc, htpasswd auth when htpasswdFile is set, an access-log line
// per request, no debug listener, no notifications. JSON strings are
// valid YAML scalars, so paths are quoted with encoding/json.
func registryConfig(dir string, sc localcp.ServingCert, htpasswdFile, secret string) []byte {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format+"\n", args...) }
	w("# Written by nodekit internal/localregistry.")
	w("version: 0.1")
	w("log:")
	w("  level: info")
	w("  formatter: text")
	w("  accesslog:")
	w("    disabled: false")
	w("storage:")
	w("  filesystem:")
	w("    rootdirectory: %s", q(dir+"/data"))
	w("  delete:")
	w("    enabled: true")
	w("  maintenance:")
	w("    uploadpurging:")
	w("      enabled: false")
	w("http:")
	w("  addr: \"\" # from REGISTRY_HTTP_ADDR")
	w("  secret: %s", q(secret))
	w("  tls:")
	w("    certificate: %s", q(sc.CertFile))
	w("    key: %s", q(sc.KeyFile))
	if htpasswdFile != "" {
		w("auth:")
		w("  htpasswd:")
		w("    realm: nodekit-local-registry")
		w("    path: %s", q(htpasswdFile))
	}
	return []byte(sb.String())
}

// process is the registry child process.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once reaped

	mu      sync.Mutex
	stopped bool
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// startProcess runs bin serve config with output to logFile, listening on
// addr. The child gets SIGTERM if the caller dies. OpenTelemetry export is
// off: the registry would otherwise send its traces to an OTLP collector.
func startProcess(bin, config, logFile, addr string) (*process, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open registry log: %w", err)
	}
	cmd := exec.Command(bin, "serve", config)
	cmd.Env = append(os.Environ(), "REGISTRY_HTTP_ADDR="+addr, "OTEL_TRACES_EXPORTER=none",
		"OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		defer close(p.done)
		// Pdeathsig follows the thread that forked the child: keep it
		// until the child is reaped, then let the thread go on.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		_ = f.Close()
		started <- err
		if err == nil {
			_ = cmd.Wait()
		}
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	return p, nil
}

// stop sends SIGTERM, waits up to stopGrace, then SIGKILLs.
func (p *process) stop(ctx context.Context) error {
	p.mu.Lock()
	first := !p.stopped
	p.stopped = true
	p.mu.Unlock()
	if first {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	select {
	case <-p.done:
		return nil
	case <-grace.C:
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Kill()
	kill := time.NewTimer(killWait)
	defer kill.Stop()
	select {
	case <-p.done:
		return nil
	case <-kill.C:
		return errors.New("registry did not exit after SIGKILL")
	}
}

// logTail returns the last lines of the log, indented, for error messages.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	off := max(st.Size()-tailMaxRead, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return "(log unreadable: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimSpace(buf), []byte("\n"))
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return "\n\t" + string(bytes.Join(lines, []byte("\n\t")))
}
