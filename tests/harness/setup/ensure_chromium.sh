#!/usr/bin/env bash
# Make sure a headless-capable Chromium is on PATH for tests/harness/lab/check_report_html.py: install Debian's
# `chromium` package when root and it is missing (waiting up to 300 s for another apt/dpkg run to let go of the
# lock), then check that it starts. Prints the path of the browser.
set -euo pipefail

die() {
  echo "ensure_chromium: $*" >&2
  exit 1
}

if ! command -v chromium >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] || die "chromium is not installed and we are not root: sudo apt-get install chromium, or re-run as root"
  echo "ensure_chromium: installing chromium" >&2
  start=$(date +%s)
  apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends chromium >/dev/null
  echo "ensure_chromium: chromium installed in $(($(date +%s) - start)) s" >&2
fi

browser=$(command -v chromium) || die "chromium is still not on PATH after the install"
"$browser" --version >/dev/null 2>&1 || die "$browser --version fails: the install looks broken (try apt-get install --reinstall chromium)"
echo "$browser"
