// Package certstore keeps a certificate and its key on disk the way
// upstream kubelet keeps its client and serving certificates, so that a
// node moves between kubelet and a nodekit agent without losing its
// identity.
//
// In a directory DIR and for a name prefix P (kubelet uses
// "kubelet-client" and "kubelet-server"):
//
//   - each stored pair is one PEM file DIR/P-YYYY-MM-DD-HH-MM-SS.pem,
//     mode 0600, holding the certificate chain ("CERTIFICATE" blocks,
//     leaf first) followed by the private key block as it was given;
//   - DIR/P-current.pem is a symlink to the absolute path of the pair in
//     use;
//   - a new pair is made current by symlinking DIR/P-updated.pem to it,
//     removing P-current.pem and renaming P-updated.pem over it. A
//     crash between the removal and the rename leaves only
//     P-updated.pem, which Open finishes renaming.
//
// When there is no P-current.pem, Current falls back to an explicit
// certificate and key file pair (kubelet's --tls-cert-file/
// --tls-private-key-file, or a kubeconfig's client-certificate and
// client-key), then to DIR/P.crt and DIR/P.key.
package certstore

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// The suffixes and qualifiers of the file names, as kubelet writes them.
const (
	pemSuffix = ".pem"
	crtSuffix = ".crt"
	keySuffix = ".key"
	current   = "current"
	updated   = "updated"
	// stampLayout is the time in a stored pair's name (local time, as
	// kubelet writes it).
	stampLayout = "2006-01-02-15-04-05"
)

// NoCertKeyError is Current's error when no pair is stored at all, as
// opposed to a pair that cannot be read.
type NoCertKeyError struct{ msg string }

func (e *NoCertKeyError) Error() string { return e.msg }

// Store is the pair files of one prefix in one directory.
type Store struct {
	logger   klog.Logger
	clock    clock.PassiveClock
	prefix   string
	certDir  string
	keyDir   string
	certFile string
	keyFile  string
}

// Options are the optional parts of a Store.
type Options struct {
	// KeyDir holds the fallback prefix.key; default the cert directory.
	KeyDir string
	// CertFile and KeyFile are an explicit pair used when there is no
	// current symlink. Both or neither.
	CertFile, KeyFile string
	// Clock names the files of new pairs; default the real clock.
	Clock clock.PassiveClock
	// Logger logs which files a pair is loaded from.
	Logger klog.Logger
}

// Open returns the store of prefix in dir, first completing a switch of
// the current pair that was interrupted (see the package comment). It
// does not create dir; Update does.
func Open(prefix, dir string, o Options) (*Store, error) {
	s := &Store{logger: o.Logger, clock: o.Clock, prefix: prefix, certDir: dir, keyDir: o.KeyDir, certFile: o.CertFile, keyFile: o.KeyFile}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	if s.keyDir == "" {
		s.keyDir = dir
	}
	if s.logger.GetSink() == nil {
		s.logger = klog.Background()
	}
	if err := s.finishSwitch(); err != nil {
		return nil, err
	}
	return s, nil
}

// name is the file name of qualifier: prefix-qualifier.pem.
func (s *Store) name(qualifier string) string { return s.prefix + "-" + qualifier + pemSuffix }

// CurrentPath is the symlink to the pair in use (which may not exist
// yet): what a kubeconfig's client-certificate and client-key name.
func (s *Store) CurrentPath() string { return filepath.Join(s.certDir, s.name(current)) }

func (s *Store) updatedPath() string { return filepath.Join(s.certDir, s.name(updated)) }

// finishSwitch renames a leftover updated symlink to current when
// current is missing.
func (s *Store) finishSwitch() error {
	if ok, err := exists(s.CurrentPath()); err != nil || ok {
		return err
	}
	fi, err := os.Lstat(s.updatedPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return fmt.Errorf("%s should be a symlink but is a regular file", s.updatedPath())
	}
	if err := os.Rename(s.updatedPath(), s.CurrentPath()); err != nil {
		return fmt.Errorf("finish switching the current pair: %w", err)
	}
	return nil
}

// Current loads the pair in use: the current symlink, else the explicit
// files, else prefix.crt and prefix.key. The Leaf is set. With none of
// them present the error is a *NoCertKeyError.
func (s *Store) Current() (*tls.Certificate, error) {
	if ok, err := exists(s.CurrentPath()); err != nil {
		return nil, err
	} else if ok {
		s.logger.Info("Loading certificate and key", "path", s.CurrentPath())
		return LoadPair(s.CurrentPath(), s.CurrentPath())
	}
	fallbacks := [][2]string{
		{s.certFile, s.keyFile},
		{filepath.Join(s.certDir, s.prefix+crtSuffix), filepath.Join(s.keyDir, s.prefix+keySuffix)},
	}
	for _, pair := range fallbacks {
		if pair[0] == "" || pair[1] == "" {
			continue
		}
		certOK, err := exists(pair[0])
		if err != nil {
			return nil, err
		}
		keyOK, err := exists(pair[1])
		if err != nil {
			return nil, err
		}
		if certOK && keyOK {
			s.logger.Info("Loading certificate and key", "certFile", pair[0], "keyFile", pair[1])
			return LoadPair(pair[0], pair[1])
		}
	}
	return nil, &NoCertKeyError{msg: fmt.Sprintf("no certificate and key at %q, (%q, %q) or in (%q, %q)",
		s.CurrentPath(), s.certFile, s.keyFile, s.certDir, s.keyDir)}
}

// Update stores a new pair (certificate chain PEM, key PEM) in a
// time-stamped file and makes it current. It returns the stored pair.
func (s *Store) Update(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	data, err := pairPEM(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.certDir, 0o755); err != nil {
		return nil, fmt.Errorf("create certificate directory: %w", err)
	}
	path := filepath.Join(s.certDir, s.name(s.clock.Now().Format(stampLayout)))
	if err := writeSynced(path, data); err != nil {
		return nil, err
	}
	pair, err := LoadPair(path, path)
	if err != nil {
		return nil, err
	}
	if err := s.point(path); err != nil {
		return nil, err
	}
	return pair, nil
}

// pairPEM is the stored file's content: every certificate of certPEM
// re-encoded, then the first PEM block of keyPEM.
func pairPEM(certPEM, keyPEM []byte) ([]byte, error) {
	var out []byte
	rest := certPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("invalid certificate: %w", err)
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes})...)
	}
	if len(out) == 0 {
		return nil, errors.New("invalid certificate: no CERTIFICATE block")
	}
	key, _ := pem.Decode(keyPEM)
	if key == nil {
		return nil, errors.New("invalid key: no PEM block")
	}
	return append(out, pem.EncodeToMemory(key)...), nil
}

// writeSynced writes data to path (mode 0600, replacing it) and syncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// point makes the current symlink point at path: updated -> path, then
// current removed and updated renamed over it.
func (s *Store) point(path string) error {
	cur, upd := s.CurrentPath(), s.updatedPath()
	curExists, err := isSymlink(cur)
	if err != nil {
		return err
	}
	if updExists, err := isSymlink(upd); err != nil {
		return err
	} else if updExists {
		if err := os.Remove(upd); err != nil {
			return err
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if err := os.Symlink(abs, upd); err != nil {
		return err
	}
	if curExists {
		if err := os.Remove(cur); err != nil {
			return err
		}
	}
	return os.Rename(upd, cur)
}

// isSymlink says whether path exists, failing if it is not a symlink.
func isSymlink(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		return false, fmt.Errorf("%s should be a symlink but is a regular file", path)
	}
	return true, nil
}

// exists says whether path exists, following symlinks.
func exists(path string) (bool, error) {
	if path == "" {
		return false, nil
	}
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// LoadPair reads a certificate and key (PEM; both may be one file) and
// sets the pair's Leaf. The server's static serving certificate is read
// with it too.
func LoadPair(certFile, keyFile string) (*tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate and key (%s, %s): %w", certFile, keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("certificate %s: %w", certFile, err)
		}
	}
	return &pair, nil
}
