package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream" //nolint:staticcheck // client-go v0.37's portforward takes this package's Dialer
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/criruntime"
	"github.com/nodekit/nodekit/server"
)

const itNode = "server-node"

// podStore is the agent's pod list in the test.
type podStore struct {
	mu   sync.Mutex
	pods []*v1.Pod
}

func (s *podStore) add(p *v1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = append(s.pods, p)
}

func (s *podStore) GetPods() []*v1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*v1.Pod(nil), s.pods...)
}

// countingStreamer counts the streaming sessions the runtime was asked for.
type countingStreamer struct {
	server.Streamer
	calls atomic.Int32
}

func (c *countingStreamer) Exec(ctx context.Context, r *runtimeapi.ExecRequest) (*url.URL, error) {
	c.calls.Add(1)
	return c.Streamer.Exec(ctx, r)
}

// clusterCA signs serving certificates with the control plane's CA, as
// kube-controller-manager's signer would.
type clusterCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func loadClusterCA(t *testing.T, dir string) *clusterCA {
	t.Helper()
	certPEM, err := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "pki", "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		t.Fatal("cluster CA files are not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return &clusterCA{cert: cert, key: key}
}

func (ca *clusterCA) sign(csr *certificatesv1.CertificateSigningRequest) ([]byte, error) {
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil {
		return nil, fmt.Errorf("CSR %s: request is not PEM", csr.Name)
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: req.Subject, DNSNames: req.DNSNames, IPAddresses: req.IPAddresses,
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, req.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// approveServingCSRs approves and signs every kubelet-serving CSR of node
// until ctx ends: the controller-manager's job, done by the test.
func approveServingCSRs(ctx context.Context, t *testing.T, admin kubernetes.Interface, ca *clusterCA) {
	csrs := admin.CertificatesV1().CertificateSigningRequests()
	w, err := csrs.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("watch CSRs: %v", err)
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		csr, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
		if !ok || ev.Type != watch.Added || csr.Spec.SignerName != server.KubeletServingSigner || csr.Spec.Username != "system:node:"+itNode {
			continue
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "TestApproved", Message: "approved by the server integration test",
		})
		approved, err := csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
		if err != nil {
			t.Errorf("approve %s: %v", csr.Name, err)
			continue
		}
		if approved.Status.Certificate, err = ca.sign(approved); err != nil {
			t.Errorf("sign %s: %v", csr.Name, err)
			continue
		}
		if _, err := csrs.UpdateStatus(ctx, approved, metav1.UpdateOptions{}); err != nil {
			t.Errorf("issue %s: %v", csr.Name, err)
		}
	}
}

// itEnv is a real control plane and containerd with the node API server
// of node itNode running on the CNI bridge's address.
type itEnv struct {
	admin    kubernetes.Interface
	adminCfg *rest.Config
	rt       *criruntime.Runtime
	pods     *podStore
	streamer *countingStreamer
	nodeIP   string
	baseURL  string // https://NODEIP:PORT
	caPool   *x509.CertPool
	cri      *agenttest.Containerd
}

func startIntegration(t *testing.T) *itEnv {
	t.Helper()
	cp := agenttest.StartControlPlane(t)
	cri := agenttest.StartContainerd(t)
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))))
	admin := cp.AdminClient()
	nodeCS, err := kubernetes.NewForConfig(cp.NodeConfig(itNode))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: cri.Endpoint, PodLogsDir: filepath.Join(t.TempDir(), "logs")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	nodeIP := cri.Gateway.String()

	// The serving certificate comes from a kubernetes.io/kubelet-serving
	// CSR that the test approves and signs with the cluster CA.
	go approveServingCSRs(ctx, t, admin, loadClusterCA(t, cp.Dir))
	certs, err := server.NewCSRCertificate(server.CSRConfig{
		Client: nodeCS.CertificatesV1().CertificateSigningRequests(), NodeName: itNode,
		IPs: []net.IP{cri.Gateway}, DNSNames: []string{itNode}, Dir: t.TempDir(), WaitTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.RotateIfDue(ctx); err != nil {
		t.Fatalf("serving certificate: %v", err)
	}

	caPool, err := server.LoadCertPool(cp.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pods := &podStore{}
	streamer := &countingStreamer{Streamer: rt}
	reg := prometheus.NewRegistry()
	if _, err := server.RegisterAgentMetrics(reg); err != nil {
		t.Fatal(err)
	}
	stats := server.StatsProviderFunc(func(context.Context, bool) (*statsapi.Summary, error) {
		return &statsapi.Summary{Node: statsapi.NodeStats{NodeName: itNode, StartTime: metav1.Now()}}, nil
	})
	srv, err := server.New(server.Config{
		NodeName:    itNode,
		Certificate: certs,
		Authenticator: server.UnionAuthenticator(
			server.NewX509Authenticator(caPool, nil),
			server.NewTokenReviewAuthenticator(nodeCS.AuthenticationV1().TokenReviews(), server.TokenOptions{}),
		),
		Authorizer: server.NewSubjectAccessReviewAuthorizer(nodeCS.AuthorizationV1().SubjectAccessReviews(), server.AuthorizerOptions{}),
		Pods:       pods, Runtime: rt, Streaming: streamer, Stats: stats,
		Metrics: reg, MetricsRegisterer: reg,
		HealthChecks: []server.HealthCheck{server.NamedCheck("syncloop", func() error { return nil })},
		// As fullagent (4h by default): kubectl exec below runs through
		// the idle watch.
		StreamingIdleTimeout: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srvCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(srvCtx, l) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	port := l.Addr().(*net.TCPAddr).Port

	// Register the node so the API server can reach its API.
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: itNode}}
	created, err := nodeCS.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: nodeIP}}
	created.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	if _, err := nodeCS.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager: give the namespace its default account.
	_, err = admin.CoreV1().ServiceAccounts("default").Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return &itEnv{admin: admin, adminCfg: cp.Admin, rt: rt, pods: pods, streamer: streamer, nodeIP: nodeIP,
		baseURL: "https://" + net.JoinHostPort(nodeIP, strconv.Itoa(port)), caPool: caPool, cri: cri}
}

// startPod creates the pod in the API server, bound to the node, and runs
// it on containerd; env gives the containers' environment.
func (e *itEnv) startPod(t *testing.T, pod *v1.Pod, env map[string]string) *v1.Pod {
	t.Helper()
	pod.Namespace = "default"
	pod.Spec.NodeName = itNode
	pod.Spec.AutomountServiceAccountToken = new(bool)
	created, err := e.admin.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.pods.add(created)
	res := e.rt.SyncPod(t.Context(), nodekit.SyncPodRequest{
		Pod: created, Actions: nodekit.PodActions{CreateSandbox: true, ContainersToStart: []int{0}},
		Options: envOptions(env),
	})
	if err := res.Err(); err != nil {
		t.Fatalf("start pod %s: %v", pod.Name, err)
	}
	return created
}

func envOptions(env map[string]string) nodekit.ContainerOptionsFunc {
	return func(context.Context, *v1.Pod, *v1.Container, []string) (*nodekit.ContainerOptions, error) {
		o := &nodekit.ContainerOptions{}
		for k, v := range env {
			o.Envs = append(o.Envs, nodekit.EnvVar{Name: k, Value: v})
		}
		return o, nil
	}
}

// waitContainer polls the runtime until the pod's newest "app" instance
// satisfies cond.
func (e *itEnv) waitContainer(t *testing.T, pod *v1.Pod, what string, cond func(*nodekit.ContainerStatus) bool) *nodekit.PodStatus {
	t.Helper()
	var st *nodekit.PodStatus
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		st, err = e.rt.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			return false, nil
		}
		c := st.FindContainer("app")
		return c != nil && cond(c), nil
	})
	if err != nil {
		t.Fatalf("pod %s: container not %s", pod.Name, what)
	}
	return st
}

func (e *itEnv) logs(t *testing.T, pod string, opts *v1.PodLogOptions) string {
	t.Helper()
	b, err := e.admin.CoreV1().Pods("default").GetLogs(pod, opts).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("logs of %s (%+v): %v: %s", pod, opts, err, b)
	}
	return string(b)
}

func (e *itEnv) execRequest(pod string, opts *v1.PodExecOptions) *rest.Request {
	return e.admin.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).
		SubResource("exec").VersionedParams(opts, scheme.ParameterCodec)
}

// direct calls the node's API without going through the API server,
// verifying its serving certificate against the cluster CA.
func (e *itEnv) direct(t *testing.T, method, path, token string) (int, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.caPool}}}
	req, err := http.NewRequestWithContext(t.Context(), method, e.baseURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "SPDY/3.1")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestIntegrationThroughAPIServer(t *testing.T) {
	e := startIntegration(t)
	ctx := t.Context()

	logPod := e.startPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "logs"},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{
			Name: "app", Image: agenttest.BusyboxImage,
			Command: []string{"sh", "-c", `echo run-$RUN; echo oops-$RUN >&2; if [ "$RUN" = 2 ]; then i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done; fi`},
		}}},
	}, map[string]string{"RUN": "1"})
	// The first instance exits; start the second, as a restart would.
	st := e.waitContainer(t, logPod, "exited", func(c *nodekit.ContainerStatus) bool { return c.State == nodekit.StateExited })
	if err := e.rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: logPod, Status: st, Actions: nodekit.PodActions{ContainersToStart: []int{0}},
		Options: envOptions(map[string]string{"RUN": "2"})}).Err(); err != nil {
		t.Fatal(err)
	}
	e.waitContainer(t, logPod, "running again", func(c *nodekit.ContainerStatus) bool { return c.State == nodekit.StateRunning })

	t.Run("kubectl logs", func(t *testing.T) {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return strings.Contains(e.logs(t, "logs", &v1.PodLogOptions{Container: "app"}), "tick-0"), nil
		})
		out := e.logs(t, "logs", &v1.PodLogOptions{Container: "app"})
		// stdout and stderr are separate pipes: their order is not fixed.
		if lines := strings.Split(out, "\n"); err != nil || len(lines) < 4 || !sameLines(lines[:3], "run-2", "oops-2", "tick-0") {
			t.Fatalf("logs: %q", out)
		}
		tail := int64(1)
		if out := e.logs(t, "logs", &v1.PodLogOptions{Container: "app", TailLines: &tail, Timestamps: true}); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (run-2|oops-2|tick-\d+)\n$`).MatchString(out) {
			t.Fatalf("logs --tail=1 --timestamps: %q", out)
		}
	})

	t.Run("kubectl logs --previous", func(t *testing.T) {
		if out := e.logs(t, "logs", &v1.PodLogOptions{Container: "app", Previous: true}); !sameLines(strings.Split(strings.TrimSuffix(out, "\n"), "\n"), "run-1", "oops-1") {
			t.Fatalf("logs --previous: %q", out)
		}
	})

	t.Run("kubectl logs -f", func(t *testing.T) {
		rc, err := e.admin.CoreV1().Pods("default").GetLogs("logs", &v1.PodLogOptions{Container: "app", Follow: true}).Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		lines := bufio.NewScanner(rc)
		first := -1
		for lines.Scan() {
			var n int
			if _, err := fmt.Sscanf(lines.Text(), "tick-%d", &n); err != nil {
				continue
			}
			if first < 0 {
				first = n
			}
			if n >= first+3 { // lines written after the follow began arrived
				return
			}
		}
		t.Fatalf("follow ended before new lines: %v", lines.Err())
	})

	t.Run("kubectl exec -- sh -c 'echo hi'", func(t *testing.T) {
		req := e.execRequest("logs", &v1.PodExecOptions{Container: "app", Command: []string{"sh", "-c", "echo hi"}, Stdout: true, Stderr: true})
		// kubectl's default: WebSocket to the API server, which speaks SPDY to the node.
		exec, err := remotecommand.NewWebSocketExecutor(e.adminCfg, "GET", req.URL().String())
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
			t.Fatalf("exec: %v (stderr %q)", err, stderr.String())
		}
		if stdout.String() != "hi\n" {
			t.Fatalf("exec stdout %q stderr %q", stdout.String(), stderr.String())
		}
	})

	t.Run("kubectl exec -i with stdin", func(t *testing.T) {
		req := e.execRequest("logs", &v1.PodExecOptions{Container: "app", Command: []string{"sh", "-c", "tr a-z A-Z; exit 3"}, Stdin: true, Stdout: true, Stderr: true})
		exec, err := remotecommand.NewSPDYExecutor(e.adminCfg, "POST", req.URL())
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("hello stdin\n"), Stdout: &stdout, Stderr: &stderr})
		if stdout.String() != "HELLO STDIN\n" {
			t.Fatalf("exec -i stdout %q stderr %q err %v", stdout.String(), stderr.String(), err)
		}
		if err == nil || !strings.Contains(err.Error(), "exit code 3") {
			t.Fatalf("exit code not reported: %v", err)
		}
	})

	t.Run("kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary", func(t *testing.T) {
		b, err := e.admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", itNode, "proxy", "stats", "summary").DoRaw(ctx)
		var sum statsapi.Summary
		if err != nil || json.Unmarshal(b, &sum) != nil || sum.Node.NodeName != itNode {
			t.Fatalf("stats summary: %v %s", err, b)
		}
		b, err = e.admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", itNode, "proxy", "metrics").DoRaw(ctx)
		if err != nil || !strings.Contains(string(b), "kubelet_running_pods") || !strings.Contains(string(b), "kubelet_http_requests_total") {
			t.Fatalf("metrics: %v %.300s", err, b)
		}
		b, err = e.admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", itNode, "proxy", "pods").DoRaw(ctx)
		if err != nil || !strings.Contains(string(b), `"name":"logs"`) {
			t.Fatalf("pods: %v %.300s", err, b)
		}
	})

	t.Run("unauthenticated exec gets 401", func(t *testing.T) {
		before := e.streamer.calls.Load()
		code, body := e.direct(t, "POST", "/exec/default/logs/app?command=sh&command=-c&command=touch+/pwned&output=1", "")
		if code != http.StatusUnauthorized || e.streamer.calls.Load() != before {
			t.Fatalf("got %d %q, %d exec sessions", code, body, e.streamer.calls.Load()-before)
		}
	})

	t.Run("token without nodes/proxy gets 403", func(t *testing.T) {
		token := e.serviceAccountToken(t, "nobody", false)
		before := e.streamer.calls.Load()
		code, body := e.direct(t, "POST", "/exec/default/logs/app?command=sh&command=-c&command=touch+/pwned&output=1", token)
		if code != http.StatusForbidden || !strings.Contains(body, "system:serviceaccount:default:nobody") || e.streamer.calls.Load() != before {
			t.Fatalf("got %d %q, %d exec sessions", code, body, e.streamer.calls.Load()-before)
		}
		if code, _ := e.direct(t, "GET", "/pods", token); code != http.StatusForbidden {
			t.Fatalf("/pods without rights: %d", code)
		}
	})

	t.Run("token with kubelet-api-admin is allowed", func(t *testing.T) {
		token := e.serviceAccountToken(t, "prober", true)
		if code, body := e.direct(t, "GET", "/healthz", token); code != http.StatusOK || body != "ok" {
			t.Fatalf("/healthz: %d %q", code, body)
		}
	})

	t.Run("kubectl port-forward to agnhost netexec", func(t *testing.T) {
		if !e.cri.HasImage(agenttest.AgnhostImage) {
			agenttest.RequireIntegration(t, "agnhost image", fmt.Errorf("%s was not imported (build _output/bin/agnhost)", agenttest.AgnhostImage))
		}
		pod := e.startPod(t, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "netexec"},
			Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{
				Name: "app", Image: agenttest.AgnhostImage, Args: []string{"netexec", "--http-port=8080"},
			}}},
		}, nil)
		st := e.waitContainer(t, pod, "running", func(c *nodekit.ContainerStatus) bool { return c.State == nodekit.StateRunning })
		// Wait until netexec listens (a forward to a closed port ends the
		// client's whole port-forward, as kubectl's).
		if len(st.IPs) == 0 {
			t.Fatal("netexec pod has no IP")
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(st.IPs[0], "8080"))
			if err != nil {
				return false, nil
			}
			c.Close()
			return true, nil
		})
		if err != nil {
			t.Fatal("netexec does not listen on :8080")
		}
		pfURL := e.admin.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("netexec").SubResource("portforward").URL()
		transport, upgrader, err := spdy.RoundTripperFor(e.adminCfg)
		if err != nil {
			t.Fatal(err)
		}
		spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", pfURL)
		wsDialer, err := portforward.NewSPDYOverWebsocketDialer(pfURL, e.adminCfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []struct {
			name   string
			dialer httpstream.Dialer
		}{{"spdy", spdyDialer}, {"websocket (kubectl's default)", wsDialer}} {
			t.Run(d.name, func(t *testing.T) {
				stop, ready := make(chan struct{}), make(chan struct{})
				var out, errOut bytes.Buffer
				pf, err := portforward.NewOnAddresses(d.dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, &out, &errOut)
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- pf.ForwardPorts() }()
				defer func() {
					close(stop)
					_ = <-done
				}()
				select {
				case <-ready:
				case err := <-done:
					t.Fatalf("port-forward: %v (%s)", err, errOut.String())
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				}
				ports, err := pf.GetPorts()
				if err != nil {
					t.Fatal(err)
				}
				var body string
				err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
					req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/echo?msg=through-the-node", ports[0].Local), nil)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						return false, nil
					}
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body)
					body = string(b)
					return resp.StatusCode == 200, nil
				})
				if err != nil || body != "through-the-node" {
					t.Fatalf("through the forwarded port: %q %v (%s)", body, err, errOut.String())
				}
			})
		}
	})
}

// sameLines reports whether lines are want in any order.
func sameLines(lines []string, want ...string) bool {
	got := slices.Clone(lines)
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// serviceAccountToken creates a service account and a token for it (via
// TokenRequest), bound to system:kubelet-api-admin when admin is set.
func (e *itEnv) serviceAccountToken(t *testing.T, name string, admin bool) string {
	t.Helper()
	ctx := t.Context()
	if _, err := e.admin.CoreV1().ServiceAccounts("default").Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if admin {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "server-test-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "default"}},
		}
		if _, err := e.admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	secs := int64(600)
	tr, err := e.admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
