package localcri

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

const (
	basePasswd = "root:x:0:0:root:/root:/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	baseGroup = "root:x:0:\n" +
		"nobody:x:65534:\n"
	// As upstream's agnhost Dockerfile: `adduser -u 1000 -D
	// user-defined-in-image && addgroup -g 50000 group-defined-in-image &&
	// addgroup user-defined-in-image group-defined-in-image`.
	agnhostPasswd = basePasswd +
		"user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh\n"
	agnhostGroup = baseGroup +
		"user-defined-in-image:x:1000:\n" +
		"group-defined-in-image:x:50000:user-defined-in-image\n"
)

// baseLayer is the busybox rootfs every image starts from.
func baseLayer(busybox string, applets []string) []fileEntry {
	entries := []fileEntry{
		dirEntry("bin", 0o755),
		dirEntry("dev", 0o755),
		dirEntry("etc", 0o755),
		dirEntry("home", 0o755),
		dirEntry("proc", 0o555),
		dirEntry("root", 0o700),
		dirEntry("sbin", 0o755),
		dirEntry("sys", 0o555),
		dirEntry("tmp", 0o1777),
		dirEntry("usr", 0o755),
		dirEntry("usr/bin", 0o755),
		dirEntry("usr/sbin", 0o755),
		dirEntry("var", 0o755),
		fileFrom("bin/busybox", 0o755, busybox),
		fileData("etc/passwd", 0o644, []byte(basePasswd)),
		fileData("etc/group", 0o644, []byte(baseGroup)),
		fileData("etc/hosts", 0o644, nil),
		fileData("etc/resolv.conf", 0o644, nil),
	}
	for _, a := range applets {
		entries = append(entries, symlink("bin/"+a, "busybox"))
	}
	return entries
}

// agnhostLayer adds what upstream's agnhost image has on top of its base.
func agnhostLayer(agnhost string) ([]fileEntry, error) {
	crt, key, err := localhostPair()
	if err != nil {
		return nil, fmt.Errorf("localhost certificate: %w", err)
	}
	home := dirEntry("home/user-defined-in-image", 0o755)
	home.uid, home.gid = 1000, 1000
	return []fileEntry{
		fileFrom("agnhost", 0o755, agnhost),
		symlink("agnhost-2", "agnhost"),
		dirEntry("uploads", 0o755),
		fileData("localhost.crt", 0o644, crt),
		fileData("localhost.key", 0o644, key),
		dirEntry("etc", 0o755),
		fileData("etc/passwd", 0o644, []byte(agnhostPasswd)),
		fileData("etc/group", 0o644, []byte(agnhostGroup)),
		dirEntry("home", 0o755),
		home,
	}, nil
}

// localhostPair returns a self-signed certificate for localhost and its key
// in PEM. Both are derived from a fixed seed (the key is public test
// material, like upstream's porter/localhost.key) so that the image digest
// stays the same from build to build.
func localhostPair() (certPEM, keyPEM []byte, err error) {
	seed := sha256.Sum256([]byte("nodekit localcri agnhost localhost.key v1"))
	key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), seed[:])
	if err != nil {
		return nil, nil, fmt.Errorf("derive key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost", Organization: []string{"nodekit test"}},
		NotBefore:             epoch(),
		NotAfter:              time.Date(2099, time.December, 31, 0, 0, 0, 0, time.UTC),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	// A nil random source makes the ECDSA signature deterministic (RFC 6979).
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}
