package certstore_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	// Upstream's store, in tests only: the files each side writes must be
	// what the other reads (nodes move between kubelet and nodekit).
	upstream "k8s.io/client-go/util/certificate"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/internal/certstore"
)

const prefix = "kubelet-client"

// newPair returns a self-signed certificate named cn and its key, PEM.
func newPair(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func open(t *testing.T, dir string, o certstore.Options) *certstore.Store {
	t.Helper()
	s, err := certstore.Open(prefix, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestUpdateLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.Local)
	clk := clocktesting.NewFakeClock(at)
	s := open(t, dir, certstore.Options{Clock: clk})
	certPEM, keyPEM := newPair(t, "first")
	// Extra text around the blocks is not stored.
	pair, err := s.Update(append([]byte("comment\n"), certPEM...), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if pair.Leaf == nil || pair.Leaf.Subject.CommonName != "first" {
		t.Fatalf("Update returned leaf %v", pair.Leaf)
	}
	first := filepath.Join(dir, "kubelet-client-2026-03-04-05-06-07.pem")
	data, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]byte{}, certPEM...), keyPEM...); !bytes.Equal(data, want) {
		t.Errorf("%s holds\n%s\nwant the certificate then the key:\n%s", first, data, want)
	}
	if fi, err := os.Stat(first); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %v (%v), want 0600", first, fi.Mode(), err)
	}
	current := filepath.Join(dir, "kubelet-client-current.pem")
	if s.CurrentPath() != current {
		t.Errorf("CurrentPath %s, want %s", s.CurrentPath(), current)
	}
	if target, err := os.Readlink(current); err != nil || target != first {
		t.Errorf("%s -> %q (%v), want the absolute %s", current, target, err, first)
	}

	clk.Step(time.Minute)
	certPEM2, keyPEM2 := newPair(t, "second")
	if _, err := s.Update(certPEM2, keyPEM2); err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(dir, "kubelet-client-2026-03-04-05-07-07.pem")
	if target, _ := os.Readlink(current); target != second {
		t.Errorf("after a second update %s -> %q, want %s", current, target, second)
	}
	if _, err := os.Stat(first); err != nil {
		t.Errorf("the previous pair was removed: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "kubelet-client-updated.pem")); !os.IsNotExist(err) {
		t.Errorf("kubelet-client-updated.pem left behind: %v", err)
	}
	got, err := s.Current()
	if err != nil || got.Leaf.Subject.CommonName != "second" {
		t.Errorf("Current = %v, %v; want the second pair", got, err)
	}
}

func TestUpdateRejects(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, certstore.Options{})
	certPEM, keyPEM := newPair(t, "x")
	_, otherKey := newPair(t, "y")
	for _, tc := range []struct {
		name      string
		cert, key []byte
		want      string
	}{
		{"no certificate", keyPEM, keyPEM, "no CERTIFICATE"},
		{"no key", certPEM, []byte("nothing"), "invalid key"},
		{"key of another certificate", certPEM, otherKey, "private key does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Update(tc.cert, tc.key); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
			if _, err := os.Lstat(s.CurrentPath()); !os.IsNotExist(err) {
				t.Errorf("a bad pair became current: %v", err)
			}
		})
	}
	// A regular file where the symlink belongs is not replaced.
	if err := os.WriteFile(s.CurrentPath(), append(certPEM, keyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(certPEM, keyPEM); err == nil || !strings.Contains(err.Error(), "should be a symlink") {
		t.Errorf("update over a regular current file: %v", err)
	}
}

// A directory kubelet wrote (upstream's FileStore, with its own clock and
// names) is read, and the directory nodekit writes is read by kubelet;
// both write the same bytes for the same pair.
func TestCompatibleWithUpstream(t *testing.T) {
	certPEM, keyPEM := newPair(t, "system:node:n1")

	kubeletDir := t.TempDir()
	theirs, err := upstream.NewFileStore(prefix, kubeletDir, kubeletDir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := theirs.Update(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	got, err := open(t, kubeletDir, certstore.Options{}).Current()
	if err != nil || got.Leaf.Subject.CommonName != "system:node:n1" {
		t.Fatalf("reading kubelet's store: %v, %v", got, err)
	}

	ourDir := t.TempDir()
	if _, err := open(t, ourDir, certstore.Options{}).Update(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	back, err := upstream.NewFileStore(prefix, ourDir, ourDir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := back.Current(); err != nil || got.Leaf.Subject.CommonName != "system:node:n1" {
		t.Fatalf("kubelet reading nodekit's store: %v, %v", got, err)
	}
	theirBytes, _ := os.ReadFile(filepath.Join(kubeletDir, "kubelet-client-current.pem"))
	ourBytes, _ := os.ReadFile(filepath.Join(ourDir, "kubelet-client-current.pem"))
	if !bytes.Equal(theirBytes, ourBytes) || len(ourBytes) == 0 {
		t.Errorf("kubelet wrote\n%s\nnodekit wrote\n%s", theirBytes, ourBytes)
	}
}

// A directory laid out by hand as kubelet lays it out, including a
// switch interrupted after the old symlink was removed.
func TestReadsKubeletLayoutByHand(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM := newPair(t, "handmade")
	file := filepath.Join(dir, "kubelet-client-2025-01-02-03-04-05.pem")
	if err := os.WriteFile(file, append(certPEM, keyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(file, filepath.Join(dir, "kubelet-client-updated.pem")); err != nil {
		t.Fatal(err)
	}
	s := open(t, dir, certstore.Options{})
	if target, err := os.Readlink(s.CurrentPath()); err != nil || target != file {
		t.Fatalf("Open did not finish the switch: current -> %q (%v)", target, err)
	}
	got, err := s.Current()
	if err != nil || got.Leaf.Subject.CommonName != "handmade" {
		t.Errorf("Current = %v, %v", got, err)
	}
}

func TestCurrentFallbacks(t *testing.T) {
	dir := t.TempDir()
	_, err := open(t, dir, certstore.Options{}).Current()
	var none *certstore.NoCertKeyError
	if !errors.As(err, &none) {
		t.Fatalf("empty store: %v, want a NoCertKeyError", err)
	}

	certPEM, keyPEM := newPair(t, "explicit")
	crt, key := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(crt, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := open(t, dir, certstore.Options{CertFile: crt, KeyFile: key}).Current()
	if err != nil || got.Leaf.Subject.CommonName != "explicit" {
		t.Errorf("explicit files: %v, %v", got, err)
	}

	certPEM, keyPEM = newPair(t, "prefixed")
	if err := os.WriteFile(filepath.Join(dir, prefix+".crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, prefix+".key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = open(t, dir, certstore.Options{}).Current()
	if err != nil || got.Leaf.Subject.CommonName != "prefixed" {
		t.Errorf("prefix.crt/.key: %v, %v", got, err)
	}

	// A broken pair is an error, not "none".
	if err := os.WriteFile(filepath.Join(dir, prefix+".key"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := open(t, dir, certstore.Options{}).Current(); err == nil || errors.As(err, &none) {
		t.Errorf("broken pair: %v, want a load error", err)
	}
}
