package volumemgr

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"golang.org/x/sys/unix"
)

// render shows a payload as sorted "path mode data" lines.
func render(p map[string]fileProjection) string {
	var lines []string
	for k, f := range p {
		lines = append(lines, fmt.Sprintf("%s %o %s", k, f.Mode, f.Data))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestConfigMapAndSecretPayloads(t *testing.T) {
	cm := &v1.ConfigMap{
		Data:       map[string]string{"a": "1", "b": "2"},
		BinaryData: map[string][]byte{"bin": {0x41}},
	}
	sec := &v1.Secret{Data: map[string][]byte{"user": []byte("admin"), "pass": []byte("pw")}}
	for _, tc := range []struct {
		name     string
		items    []v1.KeyToPath
		mode     *int32
		optional bool
		secret   bool
		want     string
	}{
		{name: "configmap all keys, API default mode", want: "a 644 1\nb 644 2\nbin 644 A"},
		{name: "configmap defaultMode", mode: ptr.To[int32](0o400), want: "a 400 1\nb 400 2\nbin 400 A"},
		{name: "configmap items with paths and modes", mode: ptr.To[int32](0o440),
			items: []v1.KeyToPath{{Key: "a", Path: "dir/first"}, {Key: "bin", Path: "raw", Mode: ptr.To[int32](0o600)}},
			want:  "dir/first 440 1\nraw 600 A"},
		{name: "configmap missing item key", items: []v1.KeyToPath{{Key: "nope", Path: "x"}},
			want: "error: configmap references non-existent config key: nope"},
		{name: "configmap missing item key, optional", optional: true,
			items: []v1.KeyToPath{{Key: "nope", Path: "x"}, {Key: "b", Path: "y"}}, want: "y 644 2"},
		{name: "secret all keys", secret: true, mode: ptr.To[int32](0o400), want: "pass 400 pw\nuser 400 admin"},
		{name: "secret items", secret: true, items: []v1.KeyToPath{{Key: "user", Path: "u", Mode: ptr.To[int32](0o444)}}, want: "u 444 admin"},
		{name: "secret missing item key", secret: true, items: []v1.KeyToPath{{Key: "token", Path: "t"}},
			want: "error: references non-existent secret key: token"},
		{name: "secret missing item key, optional", secret: true, optional: true, items: []v1.KeyToPath{{Key: "token", Path: "t"}}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p map[string]fileProjection
			var err error
			if tc.secret {
				p, err = secretPayload(tc.items, sec, tc.mode, tc.optional)
			} else {
				p, err = configMapPayload(tc.items, cm, tc.mode, tc.optional)
			}
			got := render(p)
			if err != nil {
				got = "error: " + err.Error()
			}
			if got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestDownwardAPIPayload(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "shop", UID: "uid-1",
			Labels:      map[string]string{"app": "web", "tier": "front end"},
			Annotations: map[string]string{"note": `say "hi"`},
		},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "app",
			Resources: v1.ResourceRequirements{
				Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
				Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")},
			},
		}}},
	}
	alloc := v1.ResourceList{v1.ResourceMemory: resource.MustParse("2Gi"), v1.ResourceCPU: resource.MustParse("2")}
	field := func(path, fp string) v1.DownwardAPIVolumeFile {
		return v1.DownwardAPIVolumeFile{Path: path, FieldRef: &v1.ObjectFieldSelector{FieldPath: fp}}
	}
	res := func(path, r, div string) v1.DownwardAPIVolumeFile {
		f := v1.DownwardAPIVolumeFile{Path: path, ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "app", Resource: r}}
		if div != "" {
			f.ResourceFieldRef.Divisor = resource.MustParse(div)
		}
		return f
	}
	items := []v1.DownwardAPIVolumeFile{
		field("name", "metadata.name"), field("ns", "metadata.namespace"), field("uid", "metadata.uid"),
		field("labels", "metadata.labels"), field("app", "metadata.labels['app']"),
		field("annotations", "metadata.annotations"),
		res("cpu_limit_m", "limits.cpu", "1m"), res("cpu_limit", "limits.cpu", ""),
		res("mem_limit_mi", "limits.memory", "1Mi"), res("mem_request", "requests.memory", ""),
		{Path: "./sub/../moded", Mode: ptr.To[int32](0o400), FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
	}
	p, err := downwardAPIPayload(items, pod, alloc, ptr.To[int32](0o644))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		`annotations 644 note="say \"hi\""`,
		"app 644 web",
		"cpu_limit 644 1",
		"cpu_limit_m 644 250",
		"labels 644 app=\"web\"\ntier=\"front end\"",
		"mem_limit_mi 644 2048",
		"mem_request 644 67108864",
		"moded 400 web",
		"name 644 web",
		"ns 644 shop",
		"uid 644 uid-1",
	}, "\n")
	if got := render(p); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}

	// Every bad item is reported.
	_, err = downwardAPIPayload([]v1.DownwardAPIVolumeFile{
		field("x", "spec.nodeName"), field("y", "metadata.labels['bad key!']"),
		{Path: "z", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "nope", Resource: "limits.cpu"}},
	}, pod, nil, nil)
	want = `[unsupported fieldPath: spec.nodeName, invalid key subscript in metadata.labels['bad key!']: ` +
		`name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character ` +
		`(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]'), container nope not found]`
	if fmt.Sprint(err) != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
}

func TestHostPathTypeChecks(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		path string
		typ  v1.HostPathType
		err  string
	}{
		{dir, v1.HostPathDirectory, ""},
		{file, v1.HostPathFile, ""},
		{sock, v1.HostPathSocket, ""},
		{"/dev/null", v1.HostPathCharDev, ""},
		{file, v1.HostPathDirectory, "hostPath type check failed: " + file + " is not a directory, it's a File"},
		{dir, v1.HostPathFile, "hostPath type check failed: " + dir + " is not a file, it's a Directory"},
		{file, v1.HostPathSocket, "hostPath type check failed: " + file + " is not a socket file, it's a File"},
		{dir, v1.HostPathCharDev, "hostPath type check failed: " + dir + " is not a character device, it's a Directory"},
		{"/dev/null", v1.HostPathBlockDev, "hostPath type check failed: /dev/null is not a block device, it's a CharDevice"},
		{missing, v1.HostPathFile, "hostPath type check failed, " + missing + " is not a file, unable to determine its type: path \"" + missing + "\" does not exist"},
		{missing, v1.HostPathDirectory, "hostPath type check failed, " + missing + " is not a directory, unable to determine its type: path \"" + missing + "\" does not exist"},
		{file, v1.HostPathDirectoryOrCreate, "hostPath type check failed: " + file + " is not a directory, it's a File"},
		{dir, v1.HostPathFileOrCreate, "hostPath type check failed: " + dir + " is not a file, it's a Directory"},
		{dir, "Weird", "Weird is an invalid volume type"},
	} {
		err := checkHostPathType(tc.path, tc.typ)
		if got := fmt.Sprint(err); (tc.err == "" && err != nil) || (tc.err != "" && got != tc.err) {
			t.Errorf("check(%s, %s) = %v\nwant %q", tc.path, tc.typ, err, tc.err)
		}
	}
	// A block device, if the machine shows one.
	if devs, err := os.ReadDir("/dev"); err == nil {
		for _, d := range devs {
			p := filepath.Join("/dev", d.Name())
			if info, err := os.Stat(p); err == nil && info.Mode()&os.ModeDevice != 0 && info.Mode()&os.ModeCharDevice == 0 {
				if err := checkHostPathType(p, v1.HostPathBlockDev); err != nil {
					t.Errorf("block device %s: %v", p, err)
				}
				if err := checkHostPathType(p, v1.HostPathCharDev); err == nil || !strings.HasSuffix(err.Error(), "it's a BlockDevice") {
					t.Errorf("block device %s as CharDevice: %v", p, err)
				}
				break
			}
		}
	}
	// The OrCreate types create what is missing.
	newDir, newFile := filepath.Join(dir, "a", "b"), filepath.Join(dir, "new-file")
	if err := checkHostPathType(newDir, v1.HostPathDirectoryOrCreate); err != nil {
		t.Fatal(err)
	}
	if err := checkHostPathType(newFile, v1.HostPathFileOrCreate); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(newDir); err != nil || !info.IsDir() {
		t.Fatalf("DirectoryOrCreate made %v, %v", info, err)
	}
	if info, err := os.Stat(newFile); err != nil || !info.Mode().IsRegular() {
		t.Fatalf("FileOrCreate made %v, %v", info, err)
	}
}

func TestParseMountInfo(t *testing.T) {
	in := "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n" +
		"30 22 0:25 / /var/lib/x/pods/u/volumes/kubernetes.io~secret/my\\040secret rw shared:2 - tmpfs tmpfs rw,size=1024k\n" +
		"31 22 0:26 / /a\\134b rw master:3 - nfs server:/export rw\n"
	got, err := parseMountInfo([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []MountPoint{
		{Path: "/", Type: "ext4", Source: "/dev/sda1"},
		{Path: "/var/lib/x/pods/u/volumes/kubernetes.io~secret/my secret", Type: "tmpfs", Source: "tmpfs"},
		{Path: `/a\b`, Type: "nfs", Source: "server:/export"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if _, err := parseMountInfo([]byte("garbage\n")); err == nil {
		t.Fatal("no error for a bad line")
	}
	mt := mountTable(got)
	if b := mt.below("/var/lib/x/pods/u"); len(b) != 1 {
		t.Fatalf("below = %v", b)
	}
	if _, ok := mt.at("/var/lib/x/pods/u/volumes"); ok {
		t.Fatal("at() matched a parent")
	}
}

func TestExpandSubPathExpr(t *testing.T) {
	env := map[string]string{"POD": "web-0", "NS": "shop", "EMPTY": ""}
	for _, tc := range []struct{ expr, want string }{
		{"$(POD)", "web-0"},
		{"logs/$(NS)/$(POD)", "logs/shop/web-0"},
		{"$$(POD)", "$(POD)"},
		{"a$(POD", "a$(POD"},
		{"$(MISSING)/$(POD)/$(EMPTY)", "error: missing value for EMPTY, MISSING"},
	} {
		got, err := expandSubPathExpr(tc.expr, env)
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != tc.want {
			t.Errorf("expand(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestTokenRefreshTime(t *testing.T) {
	exp := func(ttl int64, issued time.Time) *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{
			Spec:   authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl},
			Status: authenticationv1.TokenRequestStatus{ExpirationTimestamp: metav1.NewTime(issued.Add(time.Duration(ttl) * time.Second))},
		}
	}
	for _, tc := range []struct {
		ttl  int64
		want time.Duration
	}{
		{600, 480 * time.Second},
		{3607, 2886 * time.Second}, // 3607 - 721
		{7 * 24 * 3600, 24 * time.Hour},
	} {
		if got := refreshTime(exp(tc.ttl, epoch)).Sub(epoch); got != tc.want {
			t.Errorf("ttl %d: refresh after %v, want %v", tc.ttl, got, tc.want)
		}
	}
}

func TestMemoryVolumeSize(t *testing.T) {
	q := resource.MustParse
	pod := func(limits ...string) *v1.Pod {
		p := &v1.Pod{}
		for _, l := range limits {
			c := v1.Container{}
			if l != "" {
				c.Resources.Limits = v1.ResourceList{v1.ResourceMemory: q(l)}
			}
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
		return p
	}
	alloc := v1.ResourceList{v1.ResourceMemory: q("1Gi")}
	for _, tc := range []struct {
		name  string
		pod   *v1.Pod
		limit string
		alloc v1.ResourceList
		want  int64
	}{
		{"nothing known", pod(""), "", nil, 0},
		{"allocatable only", pod(""), "", alloc, 1 << 30},
		{"pod limit below allocatable", pod("64Mi", "64Mi"), "", alloc, 128 << 20},
		{"one container without limit", pod("64Mi", ""), "", alloc, 1 << 30},
		{"sizeLimit smallest", pod("64Mi"), "1Mi", alloc, 1 << 20},
		{"sizeLimit above pod limit", pod("64Mi"), "1Gi", nil, 64 << 20},
	} {
		var sl *resource.Quantity
		if tc.limit != "" {
			v := q(tc.limit)
			sl = &v
		}
		if got := memoryVolumeSize(tc.pod, sl, tc.alloc); got != tc.want {
			t.Errorf("%s: size = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestOpenNoFollowRefusesSymlinks(t *testing.T) {
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "real", "deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	fd, err := openNoFollow(filepath.Join(base, "real", "deep"), base)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(fd)
	if _, err := openNoFollow(filepath.Join(base, "link", "deep"), base); err == nil || !strings.Contains(err.Error(), "unexpected symlink found") {
		t.Fatalf("a symlink on the way was followed: %v", err)
	}
	if _, err := openNoFollow("/etc", base); err == nil || !strings.Contains(err.Error(), "outside of allowed base") {
		t.Fatalf("a path outside the base was opened: %v", err)
	}
}
