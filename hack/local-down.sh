#!/usr/bin/env bash
# Stops nodekit's local environment started by hack/local-up.sh (by its
# pidfiles). Idempotent: on a stopped environment it says "already down".
# Extra arguments go to `localenv down`, e.g. --dir DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec go run ./hack/localenv down "$@"
