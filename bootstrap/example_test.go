package bootstrap_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodekit/nodekit/bootstrap"
	"github.com/nodekit/nodekit/kubeclient"
	"github.com/nodekit/nodekit/kubeclient/clientgo"
)

// A node joins with a bootstrap token: LoadClientConfig requests its
// client certificate, stores it and writes the node's kubeconfig. Here a
// fake API server approves and signs the request at once, as
// kube-controller-manager would; a real agent leaves NewClient unset.
func Example() {
	dir, _ := os.MkdirTemp("", "bootstrap-example")
	defer os.RemoveAll(dir)

	// The bootstrap kubeconfig an operator hands out.
	boot := clientcmdapi.NewConfig()
	boot.Clusters["cluster"] = &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443", InsecureSkipTLSVerify: true}
	boot.AuthInfos["token"] = &clientcmdapi.AuthInfo{Token: "abcdef.0123456789abcdef"}
	boot.Contexts["boot"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "token"}
	boot.CurrentContext = "boot"
	bootPath := filepath.Join(dir, "bootstrap-kubeconfig")
	_ = clientcmd.WriteToFile(*boot, bootPath)

	// A fake API server whose signer approves and issues every request.
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	cs := fake.NewClientset()
	cs.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		csr := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		fmt.Println("CSR:", csr.Spec.SignerName, csr.Spec.Usages)
		block, _ := pem.Decode(csr.Spec.Request)
		req, _ := x509.ParseCertificateRequest(block.Bytes)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: req.Subject, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		der, _ := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, req.PublicKey, caKey)
		csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
		csr.Status.Certificate = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		return false, nil, nil
	})

	cfg := bootstrap.Config{
		BootstrapKubeconfig: bootPath,
		Kubeconfig:          filepath.Join(dir, "kubelet.conf"),
		CertDir:             filepath.Join(dir, "pki"),
		NodeName:            "node-1",
		NewClient:           func(*rest.Config) (kubeclient.Interface, error) { return clientgo.Wrap(cs), nil },
	}
	rc, err := bootstrap.LoadClientConfig(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("server:", rc.Host)
	fmt.Println("client certificate:", filepath.Base(rc.CertFile))
	pair, _ := os.ReadFile(rc.CertFile)
	block, _ := pem.Decode(pair)
	leaf, _ := x509.ParseCertificate(block.Bytes)
	fmt.Println("identity:", leaf.Subject.CommonName, leaf.Subject.Organization)

	// Again: the kubeconfig's certificate is valid, nothing is requested.
	if _, err := bootstrap.LoadClientConfig(context.Background(), cfg); err != nil {
		fmt.Println(err)
	}
	// Output:
	// CSR: kubernetes.io/kube-apiserver-client-kubelet [digital signature client auth]
	// server: https://10.0.0.1:6443
	// client certificate: kubelet-client-current.pem
	// identity: system:node:node-1 [system:nodes]
}
