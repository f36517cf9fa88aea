package localregistry

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/localcp"
)

// BinaryName is the registry executable under the bin dir (hack/build-registry.sh).
const BinaryName = "registry"

const (
	// readyTimeout bounds the wait for /v2/ to answer when ctx has no
	// earlier deadline.
	readyTimeout = time.Minute
	pollEvery    = 50 * time.Millisecond
	// startAttempts is how often Start retries when the port it picked was
	// taken between picking and binding.
	startAttempts = 3
	// pushUser is the account Push uses when the registry has users.
	pushUser = "nodekit-push"
)

// Config says how to run one registry.
type Config struct {
	// Dir holds the config, certificates, htpasswd, storage and log. It is
	// created if missing. Required.
	Dir string
	// BinDir is where the registry binary is; "" means $NODEKIT_BIN_DIR or
	// _output/bin of the nodekit checkout.
	BinDir string
	// Users, when not empty, turns on htpasswd authentication with these
	// user names and passwords: every request then needs one of them
	// (HTTP basic auth). Push uses an account of its own besides them.
	Users map[string]string
	// Clock dates the certificates; nil means the real clock.
	Clock clock.PassiveClock
	// PullDelay, when set, holds every manifest request of a puller
	// (not Push's) for this long, through a proxy in front of the
	// registry, and MaxConcurrentPulls reports the most that were held
	// at once: how a test sees pull concurrency.
	PullDelay time.Duration
}

// Registry is a running distribution registry of this package's own.
type Registry struct {
	Host    string // "127.0.0.1:PORT": what a hosts.toml names
	URL     string // "https://" + Host
	CAFile  string // the CA that signed the serving certificate
	CAPEM   []byte // CAFile's contents
	LogFile string // the registry's log, with one access-log line per request
	Dir     string

	pushCreds *credentials // nil without Users
	client    *http.Client
	proc      *process
	pushURL   string      // the registry itself: URL, or behind the proxy
	proxy     *delayProxy // nil without PullDelay
}

type credentials struct{ user, password string }

// MissingBinaryError reports that the registry binary is not built: test
// kits skip on it (or fail with $NODEKIT_REQUIRE_INTEGRATION).
type MissingBinaryError struct{ Path string }

func (e *MissingBinaryError) Error() string {
	return "registry binary " + e.Path + " not found; run `make tools` (hack/build-registry.sh) in the nodekit checkout"
}

// FindBinary returns the registry binary under binDir (or its default), or
// a *MissingBinaryError.
func FindBinary(binDir string) (string, error) {
	if binDir == "" {
		d, err := localcp.FindBinDir()
		if err != nil {
			return "", fmt.Errorf("registry binary: %w", err)
		}
		binDir = d
	}
	p := filepath.Join(binDir, BinaryName)
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", &MissingBinaryError{Path: p}
	}
	return p, nil
}

// Start writes the registry's config, a test CA and serving certificate
// for 127.0.0.1 and localhost, and the htpasswd file, starts the registry
// on a free loopback port and returns once /v2/ answers over TLS. The
// process gets SIGTERM when the caller dies; Stop ends it. On error
// nothing is left running.
func Start(ctx context.Context, cfg Config) (*Registry, error) {
	if cfg.Dir == "" {
		return nil, errors.New("start registry: Config.Dir is empty")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("start registry: Config.Dir: %w", err)
	}
	bin, err := FindBinary(cfg.BinDir)
	if err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if cfg.Clock != nil {
		clk = cfg.Clock
	}
	r := &Registry{Dir: dir, LogFile: filepath.Join(dir, "registry.log")}
	if err := r.prepare(clk, cfg.Users); err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	var lastErr error
	for range startAttempts {
		port, err := freePort(ctx)
		if err != nil {
			return nil, fmt.Errorf("start registry: %w", err)
		}
		if lastErr = r.run(ctx, bin, port); lastErr == nil {
			if lastErr = r.startProxy(ctx, cfg.PullDelay); lastErr != nil {
				_ = r.Stop(context.WithoutCancel(ctx))
				break
			}
			klog.FromContext(ctx).V(1).Info("Registry is ready", "url", r.URL, "auth", r.pushCreds != nil, "pid", r.proc.pid(), "pullDelay", cfg.PullDelay)
			return r, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("start registry in %s: %w", dir, lastErr)
}

// prepare writes certificates and htpasswd and builds the TLS client.
func (r *Registry) prepare(clk clock.PassiveClock, users map[string]string) error {
	if err := os.MkdirAll(filepath.Join(r.Dir, "data"), 0o755); err != nil {
		return fmt.Errorf("create dirs: %w", err)
	}
	sc, err := localcp.WriteServingCert(filepath.Join(r.Dir, "pki"), clk.Now(), "nodekit-local-registry",
		[]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return err
	}
	r.CAFile, r.CAPEM = sc.CAFile, sc.CAPEM
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(sc.CAPEM) {
		return errors.New("test CA: no certificate in PEM")
	}
	r.client = &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		Proxy:           nil, // loopback only: never a proxy from the environment
	}}
	var htpasswdFile string
	if len(users) > 0 {
		all := map[string]string{}
		for u, p := range users {
			all[u] = p
		}
		if _, clash := all[pushUser]; clash {
			return fmt.Errorf("Config.Users: %q is the name Push uses", pushUser)
		}
		pw, err := randomHex(16)
		if err != nil {
			return err
		}
		all[pushUser] = pw
		r.pushCreds = &credentials{user: pushUser, password: pw}
		data, err := htpasswd(all)
		if err != nil {
			return fmt.Errorf("Config.Users: %w", err)
		}
		htpasswdFile = filepath.Join(r.Dir, "htpasswd")
		if err := os.WriteFile(htpasswdFile, data, 0o600); err != nil {
			return fmt.Errorf("write htpasswd: %w", err)
		}
	}
	secret, err := randomHex(16)
	if err != nil {
		return err
	}
	conf := registryConfig(r.Dir, sc, htpasswdFile, secret)
	return os.WriteFile(r.configFile(), conf, 0o600)
}

func (r *Registry) configFile() string { return filepath.Join(r.Dir, "config.yml") }

// run starts the registry on port and waits for it to answer.
func (r *Registry) run(ctx context.Context, bin string, port int) error {
	r.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	r.URL = "https://" + r.Host
	r.pushURL = r.URL
	p, err := startProcess(bin, r.configFile(), r.LogFile, r.Host)
	if err != nil {
		return err
	}
	r.proc = p
	if err := r.waitReady(ctx); err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopGrace+killWait)
		defer cancel()
		_ = p.stop(stopCtx)
		return fmt.Errorf("%w (registry log: %s)", err, logTail(r.LogFile))
	}
	return nil
}

// waitReady polls GET /v2/ until it answers 200 or 401 (auth on), the
// process exits, or the deadline passes.
func (r *Registry) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var last error
	for {
		last = r.ping(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-r.proc.done:
			return fmt.Errorf("registry exited before it was ready: %w", last)
		case <-ctx.Done():
			return fmt.Errorf("registry not ready: %w (last: %w)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func (r *Registry) ping(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL+"/v2/", nil)
	if err != nil {
		return err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("GET /v2/: %s", resp.Status)
	}
	return nil
}

// startProxy puts the delay proxy in front when delay is set: Host and
// URL become the proxy's, Push keeps going to the registry itself.
func (r *Registry) startProxy(ctx context.Context, delay time.Duration) error {
	if delay <= 0 {
		return nil
	}
	backend, err := url.Parse(r.URL)
	if err != nil {
		return err
	}
	p, host, err := startDelayProxy(ctx, delay, backend, r.client.Transport, filepath.Join(r.Dir, "pki", "tls.crt"), filepath.Join(r.Dir, "pki", "tls.key"))
	if err != nil {
		return err
	}
	r.proxy, r.Host, r.URL = p, host, "https://"+host
	return nil
}

// MaxConcurrentPulls is the most manifest requests Config.PullDelay held
// at once so far (0 without PullDelay).
func (r *Registry) MaxConcurrentPulls() int {
	if r.proxy == nil {
		return 0
	}
	return r.proxy.maxInFlight()
}

// Stop ends the registry (SIGTERM, then SIGKILL) and waits for it. It is
// idempotent; the storage under Dir is left for the caller to remove.
func (r *Registry) Stop(ctx context.Context) error {
	if r == nil || r.proc == nil {
		return nil
	}
	if r.proxy != nil {
		if err := r.proxy.stop(ctx); err != nil {
			return fmt.Errorf("stop registry proxy: %w", err)
		}
	}
	if err := r.proc.stop(ctx); err != nil {
		return fmt.Errorf("stop registry: %w", err)
	}
	return nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// freePort asks the kernel for a free loopback port. Another process can
// take it before the registry binds it; Start retries then.
func freePort(ctx context.Context) (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
