# Sourced by the hack/build-*.sh scripts that build one Go command from a
# tools module of its own (hack/tools-*). build_go_tool puts it in
# _output/bin only when it is missing or the module names another version,
# and keeps it in $NODEKIT_CACHE (default /var/cache/nodekit) per version,
# so a fresh clone on the same machine copies it instead of rebuilding.
#
#   build_go_tool LABEL NAME TOOLS_DIR MODULE PACKAGE LDFLAGS [NOTE]
#
# LABEL prefixes the progress lines, NAME is the binary, TOOLS_DIR the
# tools module (relative to the repository root, the current directory),
# MODULE the module whose version names the build, PACKAGE the command to
# build, LDFLAGS its -ldflags (VERSION in them is replaced by the version),
# NOTE an optional word printed when a cold build starts.
build_go_tool() {
  local label=$1 name=$2 dir=$3 module=$4 pkg=$5 ldflags=$6 note=${7:-}
  local out version cache start
  out=$PWD/_output/bin
  version=$(cd "$dir" && go list -m -f '{{.Version}}' "$module")
  cache=${NODEKIT_CACHE:-/var/cache/nodekit}/$name-$version
  mkdir -p "$out"
  mkdir -p "$cache" 2>/dev/null || cache=""

  # A stamp beside the binary says which version it is, so that a bump in
  # the tools module rebuilds it.
  if [ -x "$out/$name" ] && [ "$(cat "$out/.$name.version" 2>/dev/null)" = "$version" ]; then
    return 0
  fi
  if [ -n "$cache" ] && [ -x "$cache/$name" ]; then
    cp "$cache/$name" "$out/$name.tmp" && mv "$out/$name.tmp" "$out/$name"
    echo "$version" >"$out/.$name.version"
    echo "$label: $name $version from $cache"
    return 0
  fi
  echo "$label: building $name $version${note:+; $note}"
  start=$SECONDS
  ldflags=${ldflags//VERSION/$version}
  (cd "$dir" && CGO_ENABLED=0 nice go build -trimpath -ldflags "$ldflags" \
    -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  echo "$version" >"$out/.$name.version"
  echo "$label: built $name in $((SECONDS - start))s"
  if [ -n "$cache" ]; then
    cp "$out/$name" "$cache/$name.tmp" && mv "$cache/$name.tmp" "$cache/$name"
  fi
}
