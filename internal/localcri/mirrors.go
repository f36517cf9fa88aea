package localcri

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MirroredRegistries are the registry names a Mirror without Names
// stands in for: those the node tests and the e2e suite pull from.
var MirroredRegistries = []string{"registry.k8s.io", "docker.io", "gcr.io", "k8s.gcr.io", "quay.io", "ghcr.io", "mcr.microsoft.com"}

// Mirror points registry names at a registry on loopback (a
// localregistry.Registry): containerd pulls images of those names from it
// instead, over TLS, trusting CAFile. It is the only host in each name's
// hosts.toml and also its server, so a failed pull never falls back to
// the real registry.
type Mirror struct {
	// Names are the registry host names it serves ("registry.k8s.io");
	// empty means MirroredRegistries.
	Names []string
	// Host is the registry's "127.0.0.1:PORT"; it must be a loopback
	// address, so that no pull leaves the machine.
	Host string
	// CAFile is the CA that signed the registry's certificate; "" means
	// the system roots (for a registry on plain HTTP use no Mirror).
	CAFile string
}

// validateMirrors checks that every mirror is on loopback and that no name
// is mirrored twice.
func validateMirrors(mirrors []Mirror) error {
	seen := map[string]bool{}
	for i, m := range mirrors {
		host, _, err := net.SplitHostPort(m.Host)
		if err != nil {
			return fmt.Errorf("Config.Mirrors[%d].Host %q: %w", i, m.Host, err)
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("Config.Mirrors[%d].Host %q: not a loopback IP address (pulls must not leave the machine)", i, m.Host)
		}
		if m.CAFile != "" && !filepath.IsAbs(m.CAFile) {
			return fmt.Errorf("Config.Mirrors[%d].CAFile %q: not an absolute path", i, m.CAFile)
		}
		for _, n := range mirrorNames(m) {
			if n == "" || n == "_default" || strings.ContainsAny(n, "/\\") || n == "." || n == ".." {
				return fmt.Errorf("Config.Mirrors[%d].Names: %q is not a registry host name", i, n)
			}
			if seen[n] {
				return fmt.Errorf("Config.Mirrors[%d].Names: %q is mirrored twice", i, n)
			}
			seen[n] = true
		}
	}
	return nil
}

func mirrorNames(m Mirror) []string {
	if len(m.Names) == 0 {
		return MirroredRegistries
	}
	return m.Names
}

// mirrorHostsTOML is the hosts.toml of a mirrored name: the mirror as
// server and as the one host, with its CA.
func mirrorHostsTOML(m Mirror) (string, error) {
	url := "https://" + m.Host
	ca := ""
	if m.CAFile != "" {
		q, err := tomlString(m.CAFile)
		if err != nil {
			return "", err
		}
		ca = "ca = " + q + "\n"
	}
	return fmt.Sprintf("# Written by nodekit internal/localcri: a local registry, nothing else.\nserver = %q\n%s\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  %s",
		url, ca, url, ca), nil
}

// writeMirrorConfig writes the hosts.toml of every mirrored name, after
// writeRegistryConfig blackholed the rest.
func writeMirrorConfig(l layout, mirrors []Mirror) error {
	for _, m := range mirrors {
		conf, err := mirrorHostsTOML(m)
		if err != nil {
			return fmt.Errorf("mirror %s: %w", m.Host, err)
		}
		for _, n := range mirrorNames(m) {
			d := filepath.Join(l.registries, n)
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(conf), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// imagesToImport is what Start imports: every image, or with mirrors and
// without preload only the pause image (the sandbox image must be there
// before any pull), so that pods pull the rest from the mirror.
func imagesToImport(images []ImageTar, mirrors []Mirror, preload bool) []ImageTar {
	if len(mirrors) == 0 || preload {
		return images
	}
	var out []ImageTar
	for _, it := range images {
		if it.Name == ImagePause {
			out = append(out, it)
		}
	}
	return out
}

// validateLocalhost checks that every name is "localhost:PORT".
func validateLocalhost(names []string) error {
	for i, n := range names {
		host, port, err := net.SplitHostPort(n)
		if err != nil || host != "localhost" || port == "" || strings.ContainsAny(port, "/\\") {
			return fmt.Errorf("Config.LocalhostRegistries[%d] %q: want localhost:PORT", i, n)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("Config.LocalhostRegistries[%d] %q: bad port", i, n)
		}
	}
	return nil
}

// writeLocalhostConfig writes the hosts.toml of each localhost name: the
// same name over plain HTTP, and nothing else.
func writeLocalhostConfig(l layout, names []string) error {
	for _, n := range names {
		url := "http://" + n
		conf := fmt.Sprintf("# Written by nodekit internal/localcri: a registry on the node's loopback.\nserver = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", url, url)
		d := filepath.Join(l.registries, n)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(conf), 0o644); err != nil {
			return err
		}
	}
	return nil
}
