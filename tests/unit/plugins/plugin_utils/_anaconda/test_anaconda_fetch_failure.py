# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why the anaconda role could not fetch its installer, and the fix, word for word."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.anaconda import anaconda_fetch_failure
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._anaconda.install import fetch_failure

URL = "https://repo.anaconda.com/miniconda/Miniconda3-py312_25.1.1-2-Linux-x86_64.sh"
NAME = "Miniconda3-py312_25.1.1-2-Linux-x86_64.sh"
SOURCE = "https://mirror.example/miniconda/" + NAME
PROXY = {"https": "http://user:secret@proxy.example:3128"}
CHECKSUM = "The checksum for /opt/conda.sh did not match 0123; it was 4567."
HIDDEN = "the download failed (details hidden: anaconda_proxy_servers is secret)"
FETCH_FIX = (" Fix: check anaconda_installer_mirror / anaconda_installer_url and anaconda_proxy_servers, or put the "
             "installer on the controller (anaconda_installer_file).")


def checksum_line(reason):
    return ("the installer at %s does not match anaconda_installer_sha256 (0123) and was thrown away; nothing was "
            "installed. %s Fix: set anaconda_installer_sha256 to the hash published for %s, or make the mirror serve the "
            "published file." % (URL, reason, NAME))


@pytest.mark.parametrize("failed_msg, proxies, expected", [
    pytest.param(CHECKSUM, {}, checksum_line(CHECKSUM), id="checksum"),
    pytest.param(CHECKSUM, PROXY, checksum_line(CHECKSUM), id="checksum-shown-with-a-proxy"),
    pytest.param("HTTP Error 404: Not Found", {}, "could not fetch %s: HTTP Error 404: Not Found%s" % (SOURCE, FETCH_FIX),
                 id="download"),
    pytest.param("Request failed: <urlopen error http://user:secret@proxy>", PROXY,
                 "could not fetch %s: %s%s" % (SOURCE, HIDDEN, FETCH_FIX), id="download-hidden-with-a-proxy"),
    pytest.param(None, {}, "could not fetch %s: unknown error%s" % (SOURCE, FETCH_FIX), id="no-message"),
    pytest.param(None, PROXY, "could not fetch %s: %s%s" % (SOURCE, HIDDEN, FETCH_FIX), id="no-message-with-a-proxy"),
    pytest.param("", {}, "could not fetch %s: %s" % (SOURCE, FETCH_FIX), id="empty-message"),
])
def test_fetch_failure(failed_msg, proxies, expected):
    assert fetch_failure(failed_msg, proxies, URL, "0123", NAME, SOURCE) == expected


def test_the_filter():
    assert anaconda_fetch_failure(None, "", URL, "0123", NAME, SOURCE).startswith("could not fetch ")
