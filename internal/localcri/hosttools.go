package localcri

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// hostTool is a program upstream's agnhost image carries (it is built on
// a distribution base with bash, curl, iproute2 and netcat) that node
// conformance tests run inside agnhost containers.
type hostTool struct {
	host  string // the program on this machine
	image string // where it goes in the image, no leading slash
}

// agnhostTools are copied from the machine with the shared libraries they
// need, so the local agnhost image runs the same commands as upstream's.
var agnhostTools = []hostTool{
	{"/usr/bin/bash", "bin/bash"},
	{"/usr/bin/curl", "usr/bin/curl"},
	{"/usr/sbin/ip", "usr/sbin/ip"},
	{"/bin/nc.openbsd", "usr/bin/nc"},
}

// shellTools make /bin/sh bash in the images tests run commands in
// (busybox, nonroot, glibc-dns-testing, agnhost). Debian's busybox-static
// shell runs its own applets before looking at PATH, so an image's nc or
// ip would never be used, and it drops environment variables whose names
// are not shell identifiers (envFrom keys such as data-1), which upstream's
// images pass on; bash does neither.
var shellTools = []hostTool{{"/usr/bin/bash", "bin/bash"}}

// shellLayer is bash with its libraries and /bin/sh pointing at it; empty
// (busybox's sh stays) where the machine has no bash.
func shellLayer(ctx context.Context) ([]fileEntry, []string, error) {
	entries, inputs, skipped, err := hostToolsLayer(ctx, shellTools)
	if err != nil || len(skipped) > 0 {
		return nil, nil, err
	}
	return append(entries, shellLink()...), inputs, nil
}

// shellLink points /bin/sh at bash; it goes in a layer that has bash.
func shellLink() []fileEntry {
	if _, err := os.Stat(shellTools[0].host); err != nil {
		return nil
	}
	return []fileEntry{symlink("bin/sh", "bash")}
}

// shellMarker goes into the cache key of images whose layer ends with
// shellLink, so images cached before it are rebuilt.
func shellMarker() []string {
	if len(shellLink()) == 0 {
		return nil
	}
	return []string{"bin/sh=bash"}
}

// glibcDNSTools are what the glibc-dns-testing image adds to busybox.
var glibcDNSTools = []hostTool{{"/usr/bin/hostname", "bin/hostname"}}

// hostToolsLayer returns the layer entries for the tools found on this
// machine and their libraries (found with ldd), plus a fingerprint of
// what went in, for the image cache key. Missing tools are reported in
// skipped, not an error: the image then lacks them.
func hostToolsLayer(ctx context.Context, tools []hostTool) (entries []fileEntry, inputs, skipped []string, err error) {
	libs := map[string]bool{}
	for _, t := range tools {
		if _, err := os.Stat(t.host); err != nil {
			skipped = append(skipped, t.host)
			continue
		}
		deps, err := sharedLibs(ctx, t.host)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, d := range deps {
			libs[d] = true
		}
		sum, err := fileDigest(t.host)
		if err != nil {
			return nil, nil, nil, err
		}
		inputs = append(inputs, t.image+"="+sum)
		entries = append(entries, fileFrom(t.image, 0o755, t.host))
	}
	var names []string
	for l := range libs {
		names = append(names, l)
	}
	sort.Strings(names)
	dirs := map[string]bool{"usr": true, "usr/bin": true, "usr/sbin": true, "bin": true}
	var dirEntries []fileEntry
	for _, l := range names {
		real, err := filepath.EvalSymlinks(l)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("resolve %s: %w", l, err)
		}
		sum, err := fileDigest(real)
		if err != nil {
			return nil, nil, nil, err
		}
		name := strings.TrimPrefix(l, "/")
		for d := path.Dir(name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			dirEntries = append(dirEntries, dirEntry(d, 0o755))
		}
		inputs = append(inputs, name+"="+sum)
		entries = append(entries, fileFrom(name, 0o755, real))
	}
	// Parents before children.
	sort.Slice(dirEntries, func(i, j int) bool { return dirEntries[i].name < dirEntries[j].name })
	return append(dirEntries, entries...), inputs, skipped, nil
}

// sharedLibs lists the absolute paths of the shared libraries (and the
// dynamic loader) a program needs, as ldd prints them.
func sharedLibs(ctx context.Context, prog string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", prog).Output()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w", prog, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2]) // libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0]) // /lib64/ld-linux-x86-64.so.2 (0x...)
		}
	}
	return libs, sc.Err()
}
