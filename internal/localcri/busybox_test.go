package localcri

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/internal/itest"
)

// The local images' /bin/sh is upstream busybox's ash, and it behaves
// where the conformance specs look: it passes on environment variables
// whose names are not identifiers, prints busybox's message for a
// read-only root filesystem, and runs what the PATH finds, not its own
// applet of that name.
func TestBusyboxShell(t *testing.T) {
	requireHost(t)
	ctx := testContext(t)
	c, cli := startWithCRI(ctx, t, Config{})
	run := func(t *testing.T, s ctrSpec) (int32, string) {
		t.Helper()
		_, code, out := runOnce(ctx, t, c, cli, s)
		return code, out
	}

	t.Run("env keeps data-1", func(t *testing.T) {
		code, out := run(t, ctrSpec{image: BusyboxImage, command: []string{"sh", "-c", "env"},
			env: []*runtimeapi.KeyValue{{Key: "data-1", Value: []byte("value-1")}, {Key: "plain", Value: []byte("v")}}})
		lines := strings.Split(out, "\n")
		if code != 0 || !slices.Contains(lines, "data-1=value-1") || !slices.Contains(lines, "plain=v") {
			t.Errorf("sh -c env: exit %d, output %q; want data-1=value-1 and plain=v in it", code, out)
		}
	})
	t.Run("read-only rootfs message", func(t *testing.T) {
		code, out := run(t, ctrSpec{image: BusyboxImage, readOnly: true,
			command: []string{"/bin/sh", "-c", "echo test > /file"}})
		if want := "/bin/sh: can't create /file: Read-only file system\n"; code == 0 || out != want {
			t.Errorf("exit %d, output %q; want a failure and exactly %q", code, out, want)
		}
	})
	t.Run("PATH before applets", func(t *testing.T) {
		// A script named ls first on the PATH runs, not busybox's ls.
		script := "mkdir /tmp/b && printf '#!/bin/sh\\necho ls-from-path\\n' >/tmp/b/ls && chmod +x /tmp/b/ls && PATH=/tmp/b:$PATH ls /"
		code, out := run(t, ctrSpec{image: BusyboxImage, command: []string{"sh", "-c", script}})
		if code != 0 || out != "ls-from-path\n" {
			t.Errorf("exit %d, output %q; want the PATH's ls", code, out)
		}
	})
	t.Run("no bash", func(t *testing.T) {
		code, out := run(t, ctrSpec{image: BusyboxImage, command: []string{"sh", "-c", "test ! -e /bin/bash && readlink /bin/sh"}})
		if code != 0 || out != "busybox\n" {
			t.Errorf("exit %d, output %q; want /bin/sh -> busybox and no /bin/bash", code, out)
		}
	})
	t.Run("glibc-dns-testing hostname", func(t *testing.T) {
		// The image's hostname is the machine's glibc one, whose -V
		// busybox's applet lacks.
		if !slices.ContainsFunc(c.Images, func(it ImageTar) bool { return it.Name == ImageGlibcDNS }) {
			itest.Require(t, "the glibc-dns-testing image", fmt.Errorf("not built: no %s", glibcDNSTools[0].host))
		}
		code, out := run(t, ctrSpec{image: GlibcDNSImage, command: []string{"sh", "-c", "hostname -V"}})
		if code != 0 || !strings.HasPrefix(out, "hostname ") {
			t.Errorf("hostname -V: exit %d, output %q; want the glibc hostname's version", code, out)
		}
	})
}
