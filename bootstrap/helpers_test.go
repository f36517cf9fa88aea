package bootstrap_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

const bootstrapToken = "abcdef.0123456789abcdef"

// testCA signs client certificates in tests.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bootstrap-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// sign issues a client certificate for a PEM certificate request, valid
// in [notBefore, notAfter].
func (ca *testCA) sign(t testing.TB, request []byte, notBefore, notAfter time.Time) []byte {
	t.Helper()
	block, _ := pem.Decode(request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		t.Fatalf("CSR request is not a PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: req.Subject, NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, req.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// fakeAPI is a fake clientset serving CSRs: decide sets the status of each
// new request as it is created (approve and issue, deny, or nothing), and
// list and watch honour the metadata.name field selector as the API
// server does.
type fakeAPI struct {
	cs *fake.Clientset

	mu      sync.Mutex
	decide  func(*certificatesv1.CertificateSigningRequest)
	created []*certificatesv1.CertificateSigningRequest
	configs []*rest.Config // one per NewClient call
}

func newFakeAPI(t testing.TB, decide func(*certificatesv1.CertificateSigningRequest)) *fakeAPI {
	t.Helper()
	f := &fakeAPI{cs: fake.NewClientset(), decide: decide}
	gvr := certificatesv1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	f.cs.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		f.mu.Lock()
		defer f.mu.Unlock()
		if obj.Name == "" {
			obj.Name = obj.GenerateName + string(rune('a'+len(f.created)))
		}
		obj.UID = types.UID("uid-" + obj.Name)
		f.created = append(f.created, obj.DeepCopy())
		if f.decide != nil {
			f.decide(obj)
		}
		return false, nil, nil // the tracker stores obj as changed here
	})
	byName := func(sel fields.Selector, name string) bool {
		return sel == nil || sel.Matches(fields.Set{"metadata.name": name})
	}
	f.cs.PrependReactor("list", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		la := a.(k8stesting.ListAction)
		obj, err := f.cs.Tracker().List(gvr, certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequest"), "")
		if err != nil {
			return true, nil, err
		}
		list := obj.(*certificatesv1.CertificateSigningRequestList)
		out := &certificatesv1.CertificateSigningRequestList{ListMeta: list.ListMeta}
		for _, it := range list.Items {
			if byName(la.GetListRestrictions().Fields, it.Name) {
				out.Items = append(out.Items, it)
			}
		}
		return true, out, nil
	})
	f.cs.PrependWatchReactor("certificatesigningrequests", func(a k8stesting.Action) (bool, watch.Interface, error) {
		sel := a.(k8stesting.WatchAction).GetWatchRestrictions().Fields
		w, err := f.cs.Tracker().Watch(gvr, "")
		if err != nil {
			return true, nil, err
		}
		return true, watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
			csr, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
			return ev, ok && byName(sel, csr.Name)
		}), nil
	})
	return f
}

// newClient is a bootstrap.NewClientFunc recording the configs it gets.
func (f *fakeAPI) newClient(rc *rest.Config) (kubeclient.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.configs = append(f.configs, rest.CopyConfig(rc))
	return clientgo.Wrap(f.cs), nil
}

func (f *fakeAPI) setDecide(d func(*certificatesv1.CertificateSigningRequest)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.decide = d
}

func (f *fakeAPI) requests() []*certificatesv1.CertificateSigningRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*certificatesv1.CertificateSigningRequest(nil), f.created...)
}

func (f *fakeAPI) clientConfigs() []*rest.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*rest.Config(nil), f.configs...)
}

// issue approves requests and issues certificates valid in [now+from, now+to].
func issue(t testing.TB, ca *testCA, from, to time.Duration) func(*certificatesv1.CertificateSigningRequest) {
	return func(csr *certificatesv1.CertificateSigningRequest) {
		now := time.Now()
		approve(csr)
		csr.Status.Certificate = ca.sign(t, csr.Spec.Request, now.Add(from), now.Add(to))
	}
}

// issueAt is issue with now read from clk.
func issueAt(t testing.TB, ca *testCA, clk clock.PassiveClock, from, to time.Duration) func(*certificatesv1.CertificateSigningRequest) {
	return func(csr *certificatesv1.CertificateSigningRequest) {
		now := clk.Now()
		approve(csr)
		csr.Status.Certificate = ca.sign(t, csr.Spec.Request, now.Add(from), now.Add(to))
	}
}

func approve(csr *certificatesv1.CertificateSigningRequest) {
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "TestApprove", Message: "approved by the test",
	})
}

func deny(reason, message string) func(*certificatesv1.CertificateSigningRequest) {
	return func(csr *certificatesv1.CertificateSigningRequest) {
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: reason, Message: message,
		})
	}
}

// writeBootstrapKubeconfig writes a token kubeconfig for server (CA caPEM
// inline, or the file caFile) and returns its path.
func writeBootstrapKubeconfig(t testing.TB, dir, server string, caPEM []byte, caFile, token string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM, CertificateAuthority: caFile}
	kc.AuthInfos["bootstrap"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["bootstrap"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "bootstrap"}
	kc.CurrentContext = "bootstrap"
	path := filepath.Join(dir, "bootstrap-kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// currentLeaf parses the certificate the current-pair symlink points at.
func currentLeaf(t testing.TB, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			t.Fatalf("%s has no certificate", path)
		}
		if b.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
}
