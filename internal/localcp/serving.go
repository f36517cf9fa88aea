package localcp

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// ServingCert is a fresh test CA and one serving certificate it signed,
// written as PEM files.
type ServingCert struct {
	CAFile   string // the CA certificate clients trust
	CertFile string // the serving certificate
	KeyFile  string // its private key (0600)
	CAPEM    []byte // the CA certificate's PEM
}

// WriteServingCert makes a new CA valid from now and a serving certificate
// for the given DNS names and IPs, and writes ca.crt, tls.crt and tls.key
// into dir. It is for other test servers on loopback (a local registry)
// that want the same kind of certificates as the control plane; the CA's
// key is not kept.
func WriteServingCert(dir string, now time.Time, commonName string, dnsNames []string, ips []net.IP) (ServingCert, error) {
	if dir == "" {
		return ServingCert{}, errors.New("serving certificate: dir is empty")
	}
	authority, err := newCA(now)
	if err != nil {
		return ServingCert{}, err
	}
	kp, err := authority.issue(now, certSpec{commonName: commonName, dnsNames: dnsNames, ips: ips, server: true})
	if err != nil {
		return ServingCert{}, err
	}
	sc := ServingCert{
		CAFile:   filepath.Join(dir, "ca.crt"),
		CertFile: filepath.Join(dir, "tls.crt"),
		KeyFile:  filepath.Join(dir, "tls.key"),
		CAPEM:    authority.certPEM,
	}
	if err := writePair(sc.CertFile, sc.KeyFile, kp); err != nil {
		return ServingCert{}, fmt.Errorf("serving certificate %q: %w", commonName, err)
	}
	if err := fsutil.WriteFileAtomic(sc.CAFile, authority.certPEM, 0o644); err != nil {
		return ServingCert{}, fmt.Errorf("serving certificate %q: CA: %w", commonName, err)
	}
	return sc, nil
}
