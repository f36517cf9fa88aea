package credentialprovider

import (
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
)

// parseSchemeless parses a registry pattern or image name, which has no
// scheme, as a URL (host and path).
func parseSchemeless(s string) (*url.URL, error) {
	u, err := url.Parse("https://" + s)
	if err != nil {
		return nil, err
	}
	u.Scheme = ""
	return u, nil
}

// hostParts splits a URL's host into its dot-separated labels and port.
func hostParts(u *url.URL) ([]string, string) {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return strings.Split(host, "."), port
}

// Match reports whether image matches pattern with kubelet's rules for
// matchImages and for the keys of a docker config: the ports are equal,
// the host has as many labels as the pattern and each label matches the
// pattern's label as a glob (so *.example.com matches a.example.com but
// not example.com or a.b.example.com), and the image's path starts with
// the pattern's path. A malformed pattern or image matches nothing.
func Match(pattern, image string) bool {
	p, err := parseSchemeless(pattern)
	if err != nil {
		return false
	}
	i, err := parseSchemeless(image)
	if err != nil {
		return false
	}
	pHost, pPort := hostParts(p)
	iHost, iPort := hostParts(i)
	if pPort != iPort || len(pHost) != len(iHost) || !strings.HasPrefix(i.Path, p.Path) {
		return false
	}
	for k := range pHost {
		if ok, err := filepath.Match(pHost[k], iHost[k]); err != nil || !ok {
			return false
		}
	}
	return true
}

// registryOf is the cache key of cacheKeyType Registry: the image's first
// path component, as kubelet takes it.
func registryOf(image string) string {
	first, _, _ := strings.Cut(image, "/")
	return first
}

// dockerKey is the keyring key of a docker config entry: host and path,
// without a scheme and without a /v1/ or /v2/ prefix of the path.
func dockerKey(entry string) (string, bool) {
	if !strings.HasPrefix(entry, "https://") && !strings.HasPrefix(entry, "http://") {
		entry = "https://" + entry
	}
	u, err := url.Parse(entry)
	if err != nil {
		return "", false
	}
	path := u.Path
	if strings.HasPrefix(path, "/v2/") || strings.HasPrefix(path, "/v1/") {
		path = path[3:]
	}
	if path == "" || path == "/" {
		return u.Host, true
	}
	return u.Host + path, true
}

// defaultRegistryHost is the docker config key of Docker Hub.
const defaultRegistryHost = "index.docker.io"

// isDockerHub reports whether image is on Docker Hub.
func isDockerHub(image string) bool {
	first, _, found := strings.Cut(image, "/")
	switch {
	case first == "":
		return false
	case !found:
		return true
	case first == "docker.io" || first == "index.docker.io":
		return true
	}
	return !strings.ContainsAny(first, ".:")
}

// lookup returns the credentials of configs (each a docker config: key
// to credential, one per provider in the config's order) that apply to
// image, in kubelet's keyring order: keys in reverse lexical order (so a
// longer path comes before its prefix), the providers' entries of one
// key in provider order, and Docker Hub's key for a Docker Hub image
// when nothing else matched.
func lookup(configs []map[string]Credential, image string) []Credential {
	byKey := map[string][]Credential{}
	for _, auths := range configs {
		entries := make([]string, 0, len(auths))
		for entry := range auths {
			entries = append(entries, entry)
		}
		slices.Sort(entries) // two entries of one key: a stable order
		for _, entry := range entries {
			if k, ok := dockerKey(entry); ok {
				byKey[k] = append(byKey[k], auths[entry])
			}
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	var out []Credential
	for _, k := range keys {
		if Match(k, image) {
			out = append(out, byKey[k]...)
		}
	}
	if len(out) == 0 && isDockerHub(image) {
		out = byKey[defaultRegistryHost]
	}
	return out
}
