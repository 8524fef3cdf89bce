#!/usr/bin/env bash
# The lab's stand-in for PyPI: Jupyter's pinned wheels laid out as a package index in INDEX_DIR
# (tests/harness/lab/jupyter_index.py) and served by the store at http://sim-store/pypi/simple/. The workspace's
# Jupyter installs from it (workspace_node.sh), and the airgap stage bundles from it (airgap_lab.py).
#
#   store_jupyter_index.sh INDEX_DIR
set -euo pipefail
cd "$(dirname "$0")/../../.."
index=${1:?usage: store_jupyter_index.sh INDEX_DIR}
.venv/bin/python tests/harness/lab/jupyter_index.py "$index" --python-version 3.13 >/dev/null
docker exec sim-store mkdir -p /var/www/html/pypi
docker cp "$index/." sim-store:/var/www/html/pypi
