#!/usr/bin/env bash
# Build (or reuse) every test image, in parallel.
set -euo pipefail
here=$(dirname "$0")
pids=()
for release in bookworm trixie; do
  "$here/build-image.sh" "$release" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
