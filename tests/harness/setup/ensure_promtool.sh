#!/usr/bin/env bash
# Put Prometheus' promtool at .cache/promtool/bin/promtool, from the distribution's `prometheus` package
# (Debian's archive is reachable here; PyPI has no promtool). `apt-get download` fetches the .deb without
# installing it (19 MB, ~2 s), dpkg-deb unpacks it; only promtool is kept. Prints promtool's path.
set -euo pipefail
cd "$(dirname "$0")/../../.."
dest=$PWD/.cache/promtool
if [ -x "$dest/bin/promtool" ]; then
  echo "$dest/bin/promtool"
  exit 0
fi
command -v apt-get >/dev/null 2>&1 || { echo "ensure_promtool: needs apt-get (Debian/Ubuntu)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -q prometheus >/dev/null 2>&1) \
  || { echo "ensure_promtool: apt-get download prometheus failed (run apt-get update?)" >&2; exit 1; }
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$dest/bin"
# A name of this process's own, then a rename: pytest's workers may fetch it at once, and none runs a half-copied file.
cp "$work/root/usr/bin/promtool" "$dest/bin/promtool.$$"
mv "$dest/bin/promtool.$$" "$dest/bin/promtool"
echo "$dest/bin/promtool"
