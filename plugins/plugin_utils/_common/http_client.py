# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the controller's HTTP client (urllib), with the proxy rules of module_utils/proxy_rules.py, a CA bundle and
credentials that go to the asked origin only. May change without notice.

The nodes have their own, stdlib-only client (module_utils/_staging/http.py); both take their proxy from
``Proxies.for_url``, so the controller and the nodes reach a store the same way.
"""

import ssl
import urllib.request
from urllib.parse import unquote, urlsplit

from ansible.module_utils.common.text.converters import to_native
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.proxy_rules import Proxies
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import basic_authorization

USER_AGENT = "dlinfra.gpu_cluster/1"


class HttpClient(object):
    """Requests to one store: its ``headers`` and Basic credentials (``user`` / ``password``, unless the headers hold an
    Authorization), its proxy (``proxy``: None for the environment's, "" for none, else a proxy URL; no_proxy either way:
    proxy_rules.Proxies, which raises ProxyError for a proxy it cannot use) and its ``ca_file``. Credentials and headers
    go to the store's origin only: a redirect does not carry them."""

    def __init__(self, headers=None, user=None, password=None, proxy=None, ca_file=None, user_agent=USER_AGENT):
        self.headers = dict(headers or {})
        if user is not None:
            self.headers.setdefault("Authorization", basic_authorization(user, password))
        self.proxies = Proxies(proxy)
        self.ca_file = ca_file
        self.user_agent = user_agent
        self._context = None

    def open(self, url, method, timeout):
        """The response (a context manager) to ``method`` ``url``; urllib's errors as they come."""
        scheme = urlsplit(url).scheme
        proxy = self.proxies.for_url(url)
        if self._context is None and scheme == "https":
            self._context = ssl.create_default_context(cafile=self.ca_file)
        handlers = [urllib.request.ProxyHandler({scheme: "http://%s:%d" % (proxy.host, proxy.port)} if proxy else {}),
                    urllib.request.HTTPSHandler(context=self._context)]
        request = urllib.request.Request(url, method=method, headers={"User-Agent": self.user_agent})
        for name, value in self.headers.items():
            request.add_unredirected_header(name, value)
        if proxy is not None and proxy.authorization:
            request.add_header("Proxy-Authorization", proxy.authorization)
        return urllib.request.build_opener(*handlers).open(request, timeout=timeout)


def read_url(url, timeout, client=None):
    """The text behind an http(s):// or file:// URL, or a path on the controller; ``client`` (an HttpClient) for http(s)."""
    if url.startswith(("http://", "https://")):
        with (client or HttpClient()).open(url, "GET", timeout) as response:
            return to_native(response.read())
    path = unquote(urlsplit(url).path) if url.startswith("file://") else url
    with open(path, encoding="utf-8") as handle:
        return handle.read()
