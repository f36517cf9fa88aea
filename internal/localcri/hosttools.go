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
	"slices"
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

// bashAsSh points /bin/sh at the bash agnhostTools put in the agnhost
// image (upstream's agnhost image is Debian-based, its sh is bash); none
// when this machine has no bash (skipped names it), and busybox's ash stays.
func bashAsSh(skipped []string) []fileEntry {
	if slices.Contains(skipped, agnhostTools[0].host) {
		return nil
	}
	return []fileEntry{symlink("bin/sh", "bash")}
}

// bashAsShMarker goes into the agnhost image's cache key when bashAsSh
// adds the link.
func bashAsShMarker(skipped []string) []string {
	if len(bashAsSh(skipped)) == 0 {
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
