package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// ParseTLSVersion reads a TLS version by upstream's names (tlsMinVersion,
// --tls-min-version): VersionTLS10, VersionTLS11, VersionTLS12 or
// VersionTLS13. "" is the default, TLS 1.2.
func ParseTLSVersion(name string) (uint16, error) {
	switch name {
	case "":
		return tls.VersionTLS12, nil
	case "VersionTLS10":
		return tls.VersionTLS10, nil
	case "VersionTLS11":
		return tls.VersionTLS11, nil
	case "VersionTLS12":
		return tls.VersionTLS12, nil
	case "VersionTLS13":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("unknown TLS version %q (want VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13)", name)
}

// cipherSuiteIDs maps every cipher suite name Go knows (secure and
// insecure, as upstream accepts both) to its ID, with the two legacy
// CHACHA20 names upstream still accepts.
func cipherSuiteIDs() map[string]uint16 {
	ids := map[string]uint16{
		"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305":   tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	}
	for _, list := range [][]*tls.CipherSuite{tls.CipherSuites(), tls.InsecureCipherSuites()} {
		for _, c := range list {
			ids[c.Name] = c.ID
		}
	}
	return ids
}

// ParseCipherSuites reads cipher suites by their crypto/tls names
// (tlsCipherSuites, --tls-cipher-suites), e.g.
// TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256. Empty means Go's defaults (nil).
// An unknown name is an error naming it. Insecure suites are accepted, as
// upstream does (it only logs them); InsecureCipherSuites lists them.
func ParseCipherSuites(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return nil, nil
	}
	ids := cipherSuiteIDs()
	out := make([]uint16, 0, len(names))
	for i, n := range names {
		id, ok := ids[strings.TrimSpace(n)]
		if !ok {
			return nil, fmt.Errorf("[%d]: cipher suite %q is not supported or does not exist", i, n)
		}
		out = append(out, id)
	}
	return out, nil
}

// InsecureCipherSuites returns the names among ids of suites crypto/tls
// calls insecure, for a warning at start.
func InsecureCipherSuites(ids []uint16) []string {
	var out []string
	for _, c := range tls.InsecureCipherSuites() {
		for _, id := range ids {
			if id == c.ID {
				out = append(out, c.Name)
			}
		}
	}
	return out
}

// ParseCurvePreferences reads key exchanges by their numeric crypto/tls
// CurveID values (tlsCurvePreferences), e.g. 23 for P-256 or 4588 for
// X25519MLKEM768. Empty means Go's defaults (nil). A value out of range,
// repeated, or unknown to this Go version is an error naming it.
func ParseCurvePreferences(ids []int32) ([]tls.CurveID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	seen := map[int32]bool{}
	out := make([]tls.CurveID, 0, len(ids))
	for i, id := range ids {
		switch {
		case id <= 0 || id > math.MaxUint16:
			return nil, fmt.Errorf("[%d]: curve %d is out of range (1-%d)", i, id, math.MaxUint16)
		case seen[id]:
			return nil, fmt.Errorf("[%d]: curve %d is repeated", i, id)
		}
		seen[id] = true
		c := tls.CurveID(id)
		// crypto/tls names every curve it implements; others print as
		// CurveID(N).
		if strings.HasPrefix(c.String(), "CurveID(") {
			return nil, fmt.Errorf("[%d]: curve %d is not supported by this Go version", i, id)
		}
		out = append(out, c)
	}
	return out, nil
}

// checkTLSSettings refuses values crypto/tls would not honour.
func checkTLSSettings(minVersion uint16, suites []uint16, curves []tls.CurveID) error {
	if minVersion != 0 && (minVersion < tls.VersionTLS10 || minVersion > tls.VersionTLS13) {
		return fmt.Errorf("server: Config.TLSMinVersion %#x is not a TLS version", minVersion)
	}
	known := map[uint16]bool{}
	for _, id := range cipherSuiteIDs() {
		known[id] = true
	}
	for i, id := range suites {
		if !known[id] {
			return fmt.Errorf("server: Config.CipherSuites[%d] %#x is not a cipher suite crypto/tls implements", i, id)
		}
	}
	// net/http's HTTP/2 refuses to serve (as upstream kubelet then exits)
	// a TLS 1.2 suite list without one of these.
	if len(suites) > 0 && (minVersion == 0 || minVersion < tls.VersionTLS13) &&
		!slices.Contains(suites, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) && !slices.Contains(suites, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256) {
		return errors.New("server: Config.CipherSuites lacks a cipher suite HTTP/2 requires: add TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 or TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")
	}
	for i, c := range curves {
		if strings.HasPrefix(c.String(), "CurveID(") {
			return fmt.Errorf("server: Config.CurvePreferences[%d] %d is not a curve crypto/tls implements", i, c)
		}
	}
	return nil
}
