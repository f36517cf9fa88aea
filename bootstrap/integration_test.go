package bootstrap_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/bootstrap"
)

const itNode = "bootstrap-node"

// TestBootstrapIntegration joins a node to a real kube-apiserver with a
// bootstrap token, then rotates its certificate. No
// kube-controller-manager runs: the test approves each CSR and signs it
// with the control plane's CA, as its csrapproving and csrsigning
// controllers would.
func TestBootstrapIntegration(t *testing.T) {
	agenttest.SkipShort(t, "the control plane")
	cp := agenttest.StartControlPlane(t, agenttest.WithAPIServerArgs("--enable-bootstrap-token-auth"))
	_, ctx := ktesting.NewTestContext(t)
	admin := cp.AdminClient()
	signer := loadControlPlaneCA(t, cp)

	// A bootstrap token, and the bootstrappers allowed to ask for node
	// client certificates (kubeadm's "kubeadm:kubelet-bootstrap" binding).
	if _, err := admin.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-abcdef", Namespace: "kube-system"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id": "abcdef", "token-secret": "0123456789abcdef",
			"usage-bootstrap-authentication": "true", "auth-extra-groups": "system:bootstrappers:nodekit",
			"expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodekit-kubelet-bootstrap"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:bootstrappers"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: itNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The signer: the first certificate is near its end (renewal due at
	// once), later ones last an hour.
	approver := &csrApprover{t: t, admin: admin, ca: signer, lifetimes: []time.Duration{time.Minute}}
	approverCtx, stopApprover := context.WithCancel(ctx)
	approverDone := approver.start(approverCtx)
	t.Cleanup(func() { stopApprover(); <-approverDone })

	dir := t.TempDir()
	rotated := make(chan *x509.Certificate, 4)
	cfg := bootstrap.Config{
		BootstrapKubeconfig: writeBootstrapKubeconfig(t, dir, cp.URL, nil, cp.CAFile, bootstrapToken),
		Kubeconfig:          filepath.Join(dir, "kubelet.conf"),
		CertDir:             filepath.Join(dir, "pki"),
		NodeName:            itNode,
		WaitTimeout:         2 * time.Minute,
		OnRotate:            func(leaf *x509.Certificate) { rotated <- leaf },
	}
	rc, err := bootstrap.LoadClientConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	requests := approver.seen()
	if len(requests) != 1 || requests[0].Spec.Username != "system:bootstrap:abcdef" ||
		!slices.Contains(requests[0].Spec.Groups, "system:bootstrappers:nodekit") {
		t.Fatalf("bootstrap CSRs %v, want one by system:bootstrap:abcdef", requests)
	}
	expectNodeIdentity(ctx, t, rc)

	// Rotation: the renewal is requested with the node's own certificate,
	// and the rotating client keeps working with the new one.
	rot, err := bootstrap.NewRotator(ctx, cfg, rc)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- rot.Run(runCtx) }()
	t.Cleanup(func() { stopRun(); _ = <-runDone })
	rotClient := rot.ClientConfig()
	expectNodeIdentity(ctx, t, rotClient)
	select {
	case leaf := <-rotated:
		if time.Until(leaf.NotAfter) < 30*time.Minute {
			t.Errorf("rotated to a certificate expiring at %v", leaf.NotAfter)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the client certificate was not rotated within 2 minutes")
	}
	requests = approver.seen()
	if len(requests) != 2 || requests[1].Spec.Username != "system:node:"+itNode {
		t.Fatalf("renewal CSRs %d, the last by %q; want one by system:node:%s", len(requests), requests[len(requests)-1].Spec.Username, itNode)
	}
	expectNodeIdentity(ctx, t, rotClient)

	// A restarted agent finds the renewed certificate through its kubeconfig.
	again, err := bootstrap.LoadClientConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(approver.seen()); n != 2 {
		t.Errorf("%d CSRs after a restart, want no new one", n)
	}
	expectNodeIdentity(ctx, t, again)
}

// expectNodeIdentity checks that rc authenticates as the node and may read
// its Node.
func expectNodeIdentity(ctx context.Context, t *testing.T, rc *rest.Config) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// A rotation closes the client's connections (as upstream's does), so
	// a request in flight at that moment fails once with a network error;
	// retry those, never an answer of the API server.
	var review *authenticationv1.SelfSubjectReview
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		review, err = cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsUnexpectedServerError(err) && apierrors.ReasonForError(err) == metav1.StatusReasonUnknown {
			t.Logf("SelfSubjectReview: %v (retrying)", err)
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo; u.Username != "system:node:"+itNode || !slices.Contains(u.Groups, "system:nodes") {
		t.Fatalf("authenticated as %q %v, want system:node:%s in system:nodes", u.Username, u.Groups, itNode)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, itNode, metav1.GetOptions{}); err != nil {
		t.Fatalf("the node cannot read its Node: %v", err)
	}
}

// loadControlPlaneCA reads the CA that kube-apiserver trusts for client
// certificates, with its key (no controller-manager runs to sign).
func loadControlPlaneCA(t *testing.T, cp *agenttest.ControlPlane) *testCA {
	t.Helper()
	certPEM, err := os.ReadFile(cp.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := cp.CAKeyFile
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatalf("control plane CA key %s: %v", keyFile, err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		t.Fatalf("CA %s / key %s are not PEM", cp.CAFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		t.Fatalf("CA key %s: %v", keyFile, err)
	}
	return &testCA{cert: cert, key: key, certPEM: certPEM}
}

// csrApprover approves and signs every kubelet client CSR, as
// kube-controller-manager would: the n-th certificate lives lifetimes[n]
// (issued 10 minutes back), or an hour past the list.
type csrApprover struct {
	t         *testing.T
	admin     kubernetes.Interface
	ca        *testCA
	lifetimes []time.Duration

	mu   sync.Mutex
	done []*certificatesv1.CertificateSigningRequest
}

func (a *csrApprover) seen() []*certificatesv1.CertificateSigningRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.done)
}

func (a *csrApprover) start(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := a.admin.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{})
			if err != nil {
				if ctx.Err() == nil {
					a.t.Errorf("watch CSRs: %v", err)
				}
				return
			}
			for ev := range w.ResultChan() {
				csr, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
				if !ok || ev.Type != watch.Added || csr.Spec.SignerName != bootstrap.SignerName || len(csr.Status.Conditions) > 0 {
					continue
				}
				if err := a.sign(ctx, csr); err != nil && ctx.Err() == nil {
					a.t.Errorf("sign CSR %s: %v", csr.Name, err)
				}
			}
			w.Stop()
		}
	}()
	return done
}

func (a *csrApprover) sign(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) error {
	want := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	if !slices.Equal(csr.Spec.Usages, want) {
		return fmt.Errorf("usages %v, want %v", csr.Spec.Usages, want)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "TestApprove", Message: "approved by the integration test",
	})
	approved, err := a.admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	a.mu.Lock()
	lifetime := time.Hour
	if n := len(a.done); n < len(a.lifetimes) {
		lifetime = a.lifetimes[n]
	}
	a.done = append(a.done, approved.DeepCopy())
	a.mu.Unlock()
	now := time.Now()
	approved.Status.Certificate = a.ca.sign(a.t, approved.Spec.Request, now.Add(-10*time.Minute), now.Add(lifetime))
	_, err = a.admin.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, approved, metav1.UpdateOptions{})
	return err
}
