package localregistry

import (
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/nodekit/nodekit/internal/localcp"
)

func TestParseReference(t *testing.T) {
	for _, tc := range []struct {
		ref, repo, tag string
		err            bool
	}{
		{ref: "registry.k8s.io/pause:3.10.1", repo: "pause", tag: "3.10.1"},
		{ref: "registry.k8s.io/e2e-test-images/busybox:1.37.0-2", repo: "e2e-test-images/busybox", tag: "1.37.0-2"},
		{ref: "docker.io/library/busybox:1.36", repo: "library/busybox", tag: "1.36"},
		{ref: "docker.io/busybox", repo: "library/busybox", tag: "latest"},
		{ref: "busybox", repo: "library/busybox", tag: "latest"},
		{ref: "team/app:v1", repo: "team/app", tag: "v1"},
		{ref: "localhost:5000/app:v1", repo: "app", tag: "v1"},
		{ref: "localhost/app", repo: "app", tag: "latest"},
		{ref: "busybox@sha256:abc", err: true},
		{ref: "", err: true},
		{ref: "registry.k8s.io/Pause:1", err: true},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			repo, tag, err := ParseReference(tc.ref)
			if tc.err {
				if err == nil {
					t.Fatalf("ParseReference(%q) = %q, %q; want an error", tc.ref, repo, tag)
				}
				return
			}
			if err != nil || repo != tc.repo || tag != tc.tag {
				t.Fatalf("ParseReference(%q) = %q, %q, %v; want %q, %q", tc.ref, repo, tag, err, tc.repo, tc.tag)
			}
		})
	}
}

func TestHtpasswd(t *testing.T) {
	data, err := htpasswd(map[string]string{"bob": "pw-b", "alice": "pw-a"})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "alice:$2") || !strings.HasPrefix(lines[1], "bob:$2") {
		t.Fatalf("htpasswd = %q; want sorted bcrypt lines", data)
	}
	hash := strings.TrimPrefix(lines[0], "alice:")
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte("pw-a")); err != nil {
		t.Errorf("alice's hash does not match her password: %v", err)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte("pw-b")); err == nil {
		t.Error("alice's hash matches bob's password")
	}
	for name, users := range map[string]map[string]string{
		"colon":          {"a:b": "x"},
		"empty password": {"a": ""},
		"none":           {},
	} {
		if _, err := htpasswd(users); err == nil {
			t.Errorf("%s: htpasswd(%v) succeeded", name, users)
		}
	}
}

func TestRegistryConfigAuth(t *testing.T) {
	sc := localcp.ServingCert{CertFile: "/d/tls.crt", KeyFile: "/d/tls.key"}
	without := string(registryConfig("/d", sc, "", "s"))
	if strings.Contains(without, "htpasswd") {
		t.Errorf("config without users has auth:\n%s", without)
	}
	with := string(registryConfig("/d", sc, "/d/htpasswd", "s"))
	for _, want := range []string{"  htpasswd:\n", `path: "/d/htpasswd"`, `certificate: "/d/tls.crt"`, `rootdirectory: "/d/data"`} {
		if !strings.Contains(with, want) {
			t.Errorf("config with users lacks %q:\n%s", want, with)
		}
	}
}
