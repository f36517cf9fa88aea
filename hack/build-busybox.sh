#!/usr/bin/env bash
# Builds upstream busybox, static, into _output/bin/busybox, only when
# missing or when it is another version. internal/localcri puts it in the
# test images (busybox, nonroot, glibc-dns-testing, ...) as their applets and
# their /bin/sh. Debian's busybox-static differs from upstream where the
# conformance specs look: its ash drops environment variables whose names
# are not shell identifiers (envFrom keys such as data-1), which upstream's
# ash keeps since 1.28, and it prefers its own applets to the PATH.
#
# The source is Debian's copy of the pristine upstream tarball (the e2e
# busybox image is 1.37.0). The sha256 below is pinned from the file this
# script downloaded on 2026-12-04 from deb.debian.org (sha256sum of it); a
# changed file at that address fails the build rather than being used.
#
# The configuration is upstream's `make defconfig` with CONFIG_STATIC=y and
# nothing else changed. The binary is also kept in $NODEKIT_CACHE (default
# /var/cache/nodekit)/busybox-VERSION, so a fresh clone on the same machine
# copies it instead of rebuilding. Needs gcc, make and bzip2. Called by
# hack/build-tools.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
version=1.37.0
url=http://deb.debian.org/debian/pool/main/b/busybox/busybox_$version.orig.tar.bz2
sha256=3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4
out=$root/_output/bin
cache=${NODEKIT_CACHE:-/var/cache/nodekit}/busybox-$version
mkdir -p "$out"
mkdir -p "$cache" 2>/dev/null || cache=""

# A stamp beside the binary says which version it is, so that a bump here
# rebuilds it.
if [ -x "$out/busybox" ] && [ "$(cat "$out/.busybox.version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
if [ -n "$cache" ] && [ -x "$cache/busybox" ]; then
  cp "$cache/busybox" "$out/busybox.tmp" && mv "$out/busybox.tmp" "$out/busybox"
  echo "$version" >"$out/.busybox.version"
  echo "build-busybox: busybox $version from $cache"
  exit 0
fi

echo "build-busybox: building busybox $version (static, upstream defconfig)"
start=$SECONDS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -fsSL -o "$work/src.tar.bz2" "$url"
if ! echo "$sha256  $work/src.tar.bz2" | sha256sum -c --quiet -; then
  echo "build-busybox: $url does not have the pinned sha256 $sha256" >&2
  exit 1
fi
tar -C "$work" -xjf "$work/src.tar.bz2"
src=$work/busybox-$version
# Output goes to the terminal only on failure: a defconfig build prints
# some thousand lines.
if ! (
  cd "$src" &&
    make defconfig &&
    sed -i 's/^# CONFIG_STATIC is not set$/CONFIG_STATIC=y/' .config &&
    grep -qx 'CONFIG_STATIC=y' .config &&
    make oldconfig </dev/null &&
    nice make -j2 busybox
) >"$work/build.log" 2>&1; then
  tail -n 40 "$work/build.log" >&2
  echo "build-busybox: the busybox build failed (log above)" >&2
  exit 1
fi
if ! file "$src/busybox" | grep -q 'statically linked'; then
  echo "build-busybox: $(file "$src/busybox"): not statically linked" >&2
  exit 1
fi
cp "$src/busybox" "$out/busybox.tmp" && mv "$out/busybox.tmp" "$out/busybox"
echo "$version" >"$out/.busybox.version"
echo "build-busybox: built busybox in $((SECONDS - start))s"
if [ -n "$cache" ]; then
  cp "$out/busybox" "$cache/busybox.tmp" && mv "$cache/busybox.tmp" "$cache/busybox"
fi
