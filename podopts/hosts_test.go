package podopts

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestHostnameAndDomain(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b" // 64 characters; the cut leaves a trailing '-'
	tests := []struct {
		name       string
		podName    string
		hostname   string
		subdomain  string
		override   *string
		fqdn       bool
		wantHost   string
		wantDomain string
		wantErr    string
	}{
		{name: "pod name", podName: "web", wantHost: "web"},
		{name: "spec hostname", podName: "web", hostname: "db-0", wantHost: "db-0"},
		{name: "subdomain", podName: "web", hostname: "db-0", subdomain: "db", wantHost: "db-0", wantDomain: "db.ns1.svc.cluster.local"},
		{name: "long pod name cut to 63 without trailing dash", podName: long, wantHost: strings.Repeat("a", 62)},
		{name: "long pod name with subdomain", podName: long, subdomain: "s", wantHost: strings.Repeat("a", 62), wantDomain: "s.ns1.svc.cluster.local"},
		{name: "override", podName: "web", hostname: "ignored", subdomain: "ignored", override: ptr("my.host.example"), wantHost: "my.host.example"},
		{name: "invalid hostname", podName: "web", hostname: "Bad_Name", wantErr: `pod Hostname "Bad_Name" is not a valid DNS label: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`},
		{name: "invalid subdomain", podName: "web", subdomain: "a.b", wantErr: `pod Subdomain "a.b" is not a valid DNS label: must not contain dots`},
		{name: "invalid override", podName: "web", override: ptr("-x"), wantErr: `pod HostnameOverride "-x" is not a valid DNS subdomain: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{name: "FQDN that fits", podName: "web", subdomain: "db", fqdn: true, wantHost: "web", wantDomain: "db.ns1.svc.cluster.local"},
		{name: "FQDN too long", podName: strings.Repeat("h", 40), subdomain: "db", fqdn: true,
			wantErr: "failed to construct FQDN from pod hostname and cluster domain, FQDN " + strings.Repeat("h", 40) + ".db.ns1.svc.cluster.local is too long (64 characters is the max, 65 characters requested)"},
		{name: "FQDN without subdomain is just the hostname", podName: strings.Repeat("h", 63), fqdn: true, wantHost: strings.Repeat("h", 63)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod(v1.Container{Name: "app"})
			pod.Name = tt.podName
			pod.Spec.Hostname = tt.hostname
			pod.Spec.Subdomain = tt.subdomain
			pod.Spec.HostnameOverride = tt.override
			pod.Spec.SetHostnameAsFQDN = ptr(tt.fqdn)
			host, domain, err := HostnameAndDomain(pod, "cluster.local")
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v\nwant %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if host != tt.wantHost || domain != tt.wantDomain {
				t.Errorf("got %q, %q; want %q, %q", host, domain, tt.wantHost, tt.wantDomain)
			}
		})
	}
}

const hostsPreamble = "# Kubernetes-managed hosts file.\n" +
	"127.0.0.1\tlocalhost\n" +
	"::1\tlocalhost ip6-localhost ip6-loopback\n" +
	"fe00::0\tip6-localnet\n" +
	"fe00::0\tip6-mcastprefix\n" +
	"fe00::1\tip6-allnodes\n" +
	"fe00::2\tip6-allrouters\n"

func TestHostsFileContent(t *testing.T) {
	aliases := []v1.HostAlias{
		{IP: "10.1.1.1", Hostnames: []string{"foo.local", "bar.local"}},
		{IP: "fd00::9", Hostnames: []string{"v6.local"}},
	}
	tests := []struct {
		name     string
		ips      []string
		host     string
		domain   string
		aliases  []v1.HostAlias
		want     string
		nodeFile string
	}{
		{name: "no domain", ips: []string{"10.0.0.5"}, host: "web", want: hostsPreamble + "10.0.0.5\tweb\n"},
		{name: "domain, dual stack", ips: []string{"10.0.0.5", "fd00::5"}, host: "db-0", domain: "db.ns1.svc.cluster.local",
			want: hostsPreamble + "10.0.0.5\tdb-0.db.ns1.svc.cluster.local\tdb-0\n" + "fd00::5\tdb-0.db.ns1.svc.cluster.local\tdb-0\n"},
		{name: "host aliases", ips: []string{"10.0.0.5"}, host: "web", aliases: aliases,
			want: hostsPreamble + "10.0.0.5\tweb\n" + "\n# Entries added by HostAliases.\n" + "10.1.1.1\tfoo.local\tbar.local\n" + "fd00::9\tv6.local\n"},
		{name: "no IPs", host: "web", want: hostsPreamble},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(HostsFileContent(tt.ips, tt.host, tt.domain, tt.aliases)); got != tt.want {
				t.Errorf("content\n got %q\nwant %q", got, tt.want)
			}
		})
	}

	node := "127.0.0.1 localhost\n192.168.1.10 node-a\n"
	want := "# Kubernetes-managed hosts file (host network).\n" + node + "\n# Entries added by HostAliases.\n10.1.1.1\tfoo.local\tbar.local\nfd00::9\tv6.local\n"
	if got := string(NodeHostsFileContent([]byte(node), aliases)); got != want {
		t.Errorf("node content\n got %q\nwant %q", got, want)
	}
	if got := string(NodeHostsFileContent([]byte(node), nil)); got != "# Kubernetes-managed hosts file (host network).\n"+node {
		t.Errorf("node content without aliases: %q", got)
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestEnsureHostsFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods", "uid-1") // does not exist yet
	path := filepath.Join(dir, "etc-hosts")

	if err := EnsureHostsFile(path, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, "one\n")
	first := inode(t, path)

	// Same content: left alone, so running containers keep sharing it.
	if err := EnsureHostsFile(path, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	if inode(t, path) != first {
		t.Error("rewrote a file that already had the content")
	}

	// New content: replaced by rename, never truncated in place.
	old, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := EnsureHostsFile(path, []byte("two\n")); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, "two\n")
	if inode(t, path) == first {
		t.Error("content changed in place, want a new file renamed over the old")
	}
	buf := make([]byte, 16)
	if n, _ := old.Read(buf); string(buf[:n]) != "one\n" {
		t.Errorf("an open reader saw %q, want the old content intact", buf[:n])
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only etc-hosts (no temp files)", len(entries))
	}

	// A directory in the way is an error, and leaves no temp file behind.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := EnsureHostsFile(blocked, []byte("x")); err == nil {
		t.Error("wrote over a non-empty directory")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("left %d entries behind", len(entries))
	}
}

func assertFile(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s = %q, want %q", path, got, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("%s mode = %v, want 0644", path, fi.Mode().Perm())
	}
}
