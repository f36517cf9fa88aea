package localcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	readyPoll    = 250 * time.Millisecond
	checkTimeout = 5 * time.Second
	// KubeletClientBinding is the ClusterRoleBinding Start creates from
	// KubeletClientUser to the cluster role system:kubelet-api-admin, so
	// node agents let the API server fetch logs, exec and port-forward.
	KubeletClientBinding = "nodekit:kube-apiserver-kubelet-client"
)

// startEtcd starts etcd on two free loopback ports and waits until /health
// answers true, retrying with new ports if one was taken meanwhile.
func (c *ControlPlane) startEtcd(ctx context.Context, bin string, detach bool) error {
	dataDir := filepath.Join(c.Dir, "etcd")
	for attempt := 1; ; attempt++ {
		ports, err := c.pickPorts(ctx, 2)
		if err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		if err := os.RemoveAll(dataDir); err != nil {
			return fmt.Errorf("etcd: clean data dir: %w", err)
		}
		args := []string{
			"--name=default",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=default=" + peerURL,
			"--initial-cluster-state=new",
			"--unsafe-no-fsync",
			"--logger=zap",
			"--log-outputs=stderr",
		}
		c.logf("starting etcd (%s), client %s, log %s", bin, clientURL, LogPath(c.Dir, ProcEtcd))
		p, err := startProc(ctx, c.Dir, ProcEtcd, bin, args, detach)
		if err != nil {
			return err
		}
		err = c.waitReady(ctx, p, "etcd /health at "+clientURL, func(ctx context.Context) error {
			return etcdHealthy(ctx, clientURL)
		})
		if err == nil {
			c.mu.Lock()
			c.etcd, c.EtcdURL = p, clientURL
			c.mu.Unlock()
			return nil
		}
		_ = p.stop(ctx, 0)
		if attempt < startAttempts && portClash(p) {
			c.logf("etcd could not bind its ports; retrying with new ones")
			continue
		}
		return err
	}
}

// startAPIServer starts kube-apiserver on a free loopback port, writes the
// admin kubeconfig and waits for /readyz, retrying with a new port if the
// picked one was taken meanwhile.
func (c *ControlPlane) startAPIServer(ctx context.Context, bin string, cfg Config) error {
	admin, err := os.ReadFile(pkiPath(c.Dir, "admin.crt"))
	if err != nil {
		return fmt.Errorf("kube-apiserver: admin certificate: %w", err)
	}
	adminKey, err := os.ReadFile(pkiPath(c.Dir, "admin.key"))
	if err != nil {
		return fmt.Errorf("kube-apiserver: admin key: %w", err)
	}
	for attempt := 1; ; attempt++ {
		ports, err := c.pickPorts(ctx, 1)
		if err != nil {
			return fmt.Errorf("kube-apiserver: %w", err)
		}
		url := "https://127.0.0.1:" + strconv.Itoa(ports[0])
		kc := kubeconfig(url, c.ca.certPEM, AdminUser, keyPair{certPEM: admin, keyPEM: adminKey})
		if err := writeKubeconfig(c.AdminKubeconfig, kc); err != nil {
			return fmt.Errorf("kube-apiserver: admin kubeconfig: %w", err)
		}
		restCfg, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
		if err != nil {
			return fmt.Errorf("kube-apiserver: admin client config: %w", err)
		}
		restCfg.QPS, restCfg.Burst = clientQPS, clientBurst
		c.mu.Lock()
		c.URL, c.Admin = url, restCfg
		c.mu.Unlock()

		args := append(c.apiserverArgs(ports[0]), cfg.APIServerArgs...)
		c.logf("starting kube-apiserver (%s) at %s, log %s", bin, url, LogPath(c.Dir, ProcAPIServer))
		p, err := startProc(ctx, c.Dir, ProcAPIServer, bin, args, cfg.Detach)
		if err != nil {
			return err
		}
		err = c.waitReady(ctx, p, "kube-apiserver /readyz at "+url, c.Ready)
		if err == nil {
			c.mu.Lock()
			c.apiserver = p
			c.mu.Unlock()
			return nil
		}
		_ = p.stop(ctx, 0)
		if attempt < startAttempts && portClash(p) {
			c.logf("kube-apiserver could not bind its port; retrying with a new one")
			continue
		}
		return err
	}
}

func (c *ControlPlane) apiserverArgs(port int) []string {
	pki := func(name string) string { return pkiPath(c.Dir, name) }
	return []string{
		"--etcd-servers=" + c.EtcdURL,
		"--secure-port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		// Dial nodes by their InternalIP: a Hostname address would make the
		// API server resolve node names through the host resolver.
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--cert-dir=" + filepath.Join(c.Dir, "pki"),
		"--tls-cert-file=" + pki("apiserver.crt"),
		"--tls-private-key-file=" + pki("apiserver.key"),
		"--client-ca-file=" + c.CAFile,
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-key-file=" + pki("sa.pub"),
		"--service-account-signing-key-file=" + c.ServiceAccountKeyFile,
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
		"--allow-privileged=true",
		"--profiling=false",
	}
}

// Ready reports whether the API server's /readyz answers "ok".
func (c *ControlPlane) Ready(ctx context.Context) error {
	c.mu.Lock()
	cfg := c.Admin
	c.mu.Unlock()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		if len(body) > 0 {
			return fmt.Errorf("/readyz: %w: %s", err, strings.TrimSpace(string(body)))
		}
		return fmt.Errorf("/readyz: %w", err)
	}
	if s := strings.TrimSpace(string(body)); s != "ok" {
		return fmt.Errorf("/readyz answered %q", s)
	}
	return nil
}

// bindKubeletClient lets the API server's kubelet-client identity use the
// node agents' API (logs, exec, port-forward, metrics).
func (c *ControlPlane) bindKubeletClient(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.Admin)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: KubeletClientBinding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: KubeletClientUser}},
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding %s: %w", KubeletClientBinding, err)
	}
	return nil
}

// waitReady polls check until it succeeds, the process exits or ctx is done.
// A check in flight is cut short when the process exits (a port clash can
// leave the check talking to whoever owns the port). The error names what
// was awaited, the last check result and the log tail.
func (c *ControlPlane) waitReady(ctx context.Context, p *proc, what string, check func(context.Context) error) error {
	checkCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-checkCtx.Done():
		}
	}()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	start := time.Now()
	for {
		last := check(checkCtx)
		if last == nil {
			c.logf("%s ok after %s", what, time.Since(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-checkCtx.Done():
		case <-tick.C:
			continue
		}
		if p.exited() {
			return fmt.Errorf("%s exited during start-up (%s) while waiting for %s\n%s",
				p.name, p.exitDescription(), what, LogTail(c.Dir, p.name))
		}
		return fmt.Errorf("waiting for %s: %w after %s (last check: %w)\n%s",
			what, ctx.Err(), time.Since(start).Round(time.Millisecond), last, LogTail(c.Dir, p.name))
	}
}

// portClash reports whether p exited because a port it was given was taken.
func portClash(p *proc) bool {
	return p.exited() && strings.Contains(LogTail(p.dir, p.name), "address already in use")
}

// etcdHealthy asks etcd's /health endpoint.
func etcdHealthy(ctx context.Context, clientURL string) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
	if err != nil {
		return err
	}
	// A private transport without proxy: this is loopback only.
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("/health: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// freePorts returns n distinct loopback ports that were free a moment ago
// (all held open together, then closed).
func freePorts(ctx context.Context, n int) ([]int, error) {
	var lc net.ListenConfig
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free loopback port: %w", err)
		}
		ls = append(ls, l)
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, errors.New("pick a free loopback port: listener address is not TCP")
		}
		ports = append(ports, addr.Port)
	}
	return ports, nil
}

// kubeconfig builds a single-context kubeconfig with embedded certificates.
func kubeconfig(server string, caPEM []byte, user string, kp keyPair) *clientcmdapi.Config {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["nodekit-local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.certPEM, ClientKeyData: kp.keyPEM}
	kc.Contexts["nodekit-local"] = &clientcmdapi.Context{Cluster: "nodekit-local", AuthInfo: user}
	kc.CurrentContext = "nodekit-local"
	return kc
}
