package bootstrap

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	certutil "k8s.io/client-go/util/cert"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

func TestClientUsages(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	want := []certificatesv1.KeyUsage{"digital signature", "key encipherment", "client auth"}
	if got := clientUsages(rsaKey); !slices.Equal(got, want) {
		t.Errorf("RSA usages %v, want %v", got, want)
	}
	want = []certificatesv1.KeyUsage{"digital signature", "client auth"}
	if got := clientUsages(ecKey); !slices.Equal(got, want) {
		t.Errorf("ECDSA usages %v, want %v", got, want)
	}
}

func condition(typ certificatesv1.RequestConditionType, reason string) certificatesv1.CertificateSigningRequestCondition {
	return certificatesv1.CertificateSigningRequestCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: "by the test"}
}

func TestCSROutcome(t *testing.T) {
	issued := []byte("-----BEGIN CERTIFICATE-----\n")
	for _, tc := range []struct {
		name       string
		uid        types.UID
		conditions []certificatesv1.CertificateSigningRequestCondition
		cert       []byte
		wantCert   bool
		wantErr    string
		wantFailed bool
	}{
		{name: "pending", uid: "u1"},
		{name: "approved, not issued", uid: "u1", conditions: []certificatesv1.CertificateSigningRequestCondition{condition(certificatesv1.CertificateApproved, "ok")}},
		{name: "issued without approval", uid: "u1", cert: issued},
		{name: "issued", uid: "u1", conditions: []certificatesv1.CertificateSigningRequestCondition{condition(certificatesv1.CertificateApproved, "ok")}, cert: issued, wantCert: true},
		{name: "denied", uid: "u1", conditions: []certificatesv1.CertificateSigningRequestCondition{condition(certificatesv1.CertificateDenied, "Nope")}, wantErr: "CSR r1 denied: Nope: by the test"},
		{name: "failed after approval", uid: "u1", cert: issued, conditions: []certificatesv1.CertificateSigningRequestCondition{
			condition(certificatesv1.CertificateApproved, "ok"), condition(certificatesv1.CertificateFailed, "SignerBroke")}, wantErr: "CSR r1 failed: SignerBroke", wantFailed: true},
		{name: "other UID", uid: "u2", cert: issued, conditions: []certificatesv1.CertificateSigningRequestCondition{condition(certificatesv1.CertificateApproved, "ok")}, wantErr: "replaced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "r1", UID: tc.uid},
				Status: certificatesv1.CertificateSigningRequestStatus{Conditions: tc.conditions, Certificate: tc.cert}}
			cert, err := csrOutcome(req, "u1")
			if (cert != nil) != tc.wantCert {
				t.Errorf("certificate %q, want one: %v", cert, tc.wantCert)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
			var denied *RequestDeniedError
			if isDenial := errors.As(err, &denied); isDenial != (tc.name != "other UID") || (isDenial && denied.Failed != tc.wantFailed) {
				t.Errorf("error %#v: RequestDeniedError %v, Failed want %v", err, isDenial, tc.wantFailed)
			}
		})
	}
}

// pendingCSR creates a request named name in cs, as the API server would
// store it (uid set), and returns it.
func pendingCSR(t *testing.T, cs *fake.Clientset, name string, uid types.UID) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	req := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
	created, err := cs.CertificatesV1().CertificateSigningRequests().Create(t.Context(), req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// watched makes cs's CSR watches tell on the returned channel once they
// are set up (the tracker sends only what changes after that).
func watched(cs *fake.Clientset) <-chan struct{} {
	started := make(chan struct{}, 8)
	gvr := certificatesv1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	cs.PrependWatchReactor("certificatesigningrequests", func(k8stesting.Action) (bool, watch.Interface, error) {
		w, err := cs.Tracker().Watch(gvr, "")
		started <- struct{}{}
		return true, w, err
	})
	return started
}

// waitAsync runs waitForCSR for name and uid in the background.
func waitAsync(t *testing.T, cs *fake.Clientset, name string, uid types.UID) <-chan error {
	errc := make(chan error, 1)
	go func() {
		cert, err := waitForCSR(t.Context(), clientgo.Wrap(cs), clocktesting.NewFakeClock(time.Now()), name, uid)
		if err == nil && len(cert) == 0 {
			err = errors.New("no error and no certificate")
		}
		if err == nil {
			err = errIssuedForTest
		}
		errc <- err
	}()
	return errc
}

var errIssuedForTest = errors.New("issued")

func TestWaitForCSR(t *testing.T) {
	approved := condition(certificatesv1.CertificateApproved, "ok")
	for _, tc := range []struct {
		name   string
		change func(*certificatesv1.CertificateSigningRequest) // nil: delete it
		want   string
	}{
		{"issued", func(r *certificatesv1.CertificateSigningRequest) {
			r.Status.Conditions = append(r.Status.Conditions, approved)
			r.Status.Certificate = []byte("cert")
		}, "issued"},
		{"denied", func(r *certificatesv1.CertificateSigningRequest) {
			r.Status.Conditions = append(r.Status.Conditions, condition(certificatesv1.CertificateDenied, "NotANode"))
		}, "CSR r1 denied: NotANode"},
		{"failed", func(r *certificatesv1.CertificateSigningRequest) {
			r.Status.Conditions = append(r.Status.Conditions, approved, condition(certificatesv1.CertificateFailed, "Unsignable"))
		}, "CSR r1 failed: Unsignable"},
		{"replaced", func(r *certificatesv1.CertificateSigningRequest) { r.UID = "someone-else" }, "replaced"},
		{"deleted", nil, "deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			req := pendingCSR(t, cs, "r1", "u1")
			started := watched(cs)
			errc := waitAsync(t, cs, "r1", "u1")
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("waitForCSR did not watch")
			}
			csrs := cs.CertificatesV1().CertificateSigningRequests()
			var err error
			if tc.change == nil {
				err = csrs.Delete(t.Context(), "r1", metav1.DeleteOptions{})
			} else {
				tc.change(req)
				_, err = csrs.UpdateStatus(t.Context(), req, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errc:
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("waitForCSR: %v, want %q", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("waitForCSR did not return after the change")
			}
		})
	}
}

// A request found by list with another UID (recreated by someone else
// under the same name) is not waited for.
func TestWaitForCSRUIDMismatchOnList(t *testing.T) {
	cs := fake.NewClientset()
	pendingCSR(t, cs, "r1", "theirs")
	_, err := waitForCSR(t.Context(), clientgo.Wrap(cs), clocktesting.NewFakeClock(time.Now()), "r1", "ours")
	if err == nil || !strings.Contains(err.Error(), "replaced (UID theirs, want ours)") {
		t.Errorf("error %v, want the UID mismatch", err)
	}
}

// A request of the same name already there is taken over only if it is
// this key's request for this identity.
func TestCreateCSRAlreadyExists(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	subject := nodeSubject("n1")
	csrPEM, err := certutil.MakeCSR(key, &subject, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	client := clientgo.Wrap(cs)
	clk := clocktesting.NewFakeClock(time.Now())
	name, uid, err := createCSR(t.Context(), client, clk, csrPEM, "node-csr-x", clientUsages(key), key)
	if err != nil || name != "node-csr-x" {
		t.Fatalf("create: %s, %v", name, err)
	}
	got, err := cs.CertificatesV1().CertificateSigningRequests().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil || got.Spec.SignerName != SignerName || !slices.Equal(got.Spec.Usages, clientUsages(key)) {
		t.Fatalf("stored request %+v, %v", got, err)
	}
	again, againUID, err := createCSR(t.Context(), client, clk, csrPEM, "node-csr-x", clientUsages(key), key)
	if err != nil || again != name || againUID != uid {
		t.Errorf("same request again: %s %s %v, want the existing one", again, againUID, err)
	}
	if _, _, err := createCSR(t.Context(), client, clk, csrPEM, "node-csr-x", clientUsages(other), other); err == nil || !strings.Contains(err.Error(), "not this node's request") {
		t.Errorf("another key's request taken over: %v", err)
	}
}
