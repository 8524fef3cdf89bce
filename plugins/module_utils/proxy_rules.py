# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which HTTP proxy a request to a store goes through, decided the way curl decides it.

From the environment: ``http_proxy`` for http:// URLs (lower case only, as curl reads it: a CGI-style
``HTTP_PROXY`` can be set by a request header), ``https_proxy`` or ``HTTPS_PROXY`` for https:// URLs,
``all_proxy`` or ``ALL_PROXY`` for both when those are unset; ``no_proxy`` or ``NO_PROXY`` lists hosts
reached directly: ``*`` for every host, a name for itself and every name under it (a leading dot is
ignored), an IP address, or an IP network in CIDR notation; ports are not compared. An explicit proxy (the
dataset's ``proxy``) replaces the environment's proxy variables, ``""`` meaning none; ``no_proxy`` still applies.
The planner's client on the controller (plugin_utils/_common/http_client.py), the source_reachable module and the
engine's client on the nodes (_staging/http.py) use this module, each through ``Proxies.for_url``.
"""

import base64
import ipaddress
import os
from urllib.parse import unquote, urlsplit


class ProxyError(ValueError):
    """A proxy setting that cannot be used (its scheme, or no host)."""


class Proxy(object):
    """An http:// proxy: where to connect, and the Proxy-Authorization header its URL's user info asks for (or None)."""

    __slots__ = ("url", "address", "host", "port", "authorization")

    def __init__(self, url):
        parts = urlsplit(url if "://" in url else "http://" + url)
        if parts.scheme != "http":
            raise ProxyError("proxy %s: only http:// proxies are supported (HTTPS goes through them with CONNECT)" % _shown(url))
        try:
            port = parts.port or 1080
        except ValueError:
            raise ProxyError("proxy %s: the port is not a number" % _shown(url))
        if not parts.hostname:
            raise ProxyError("proxy %s has no host" % _shown(url))
        self.url = _shown(url)
        self.address = url  # as given, credentials included: for clients that take a proxy URL; never shown
        self.host = parts.hostname
        self.port = port
        self.authorization = None
        if parts.username is not None:
            secret = "%s:%s" % (unquote(parts.username), unquote(parts.password or ""))
            self.authorization = "Basic " + base64.b64encode(secret.encode("utf-8")).decode("ascii")


def _shown(url):
    return "***@" + url.rpartition("@")[2] if "@" in url else url


def _environment(environ, *names):
    for name in names:
        value = environ.get(name)
        if value:
            return value.strip()
    return None


class Proxies(object):
    """The proxy for each origin of a run: ``proxy`` None (the environment's), "" (none) or a proxy URL."""

    def __init__(self, proxy=None, environ=None):
        environ = os.environ if environ is None else environ
        if proxy is None:
            http = _environment(environ, "http_proxy", "all_proxy", "ALL_PROXY")
            https = _environment(environ, "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
        else:
            http = https = proxy.strip() or None
        self.by_scheme = {"http": Proxy(http) if http else None, "https": Proxy(https) if https else None}
        self.no_proxy = [entry for entry in (_environment(environ, "no_proxy", "NO_PROXY") or "").replace(" ", ",").split(",") if entry]

    def for_url(self, url):
        """The Proxy a request to ``url`` goes through, or None to connect directly: the one place the rules apply."""
        parts = urlsplit(url)
        return self.for_origin(parts.scheme, parts.hostname or "")

    def for_origin(self, scheme, host):
        """The Proxy to reach scheme://host through, or None to connect directly."""
        proxy = self.by_scheme.get(scheme)
        if proxy is None or self.bypass(host):
            return None
        return proxy

    def bypass(self, host):
        """Whether no_proxy names host (curl's rules, see the module's docstring)."""
        host = host.strip("[]").rstrip(".").lower()
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        for entry in self.no_proxy:
            if entry == "*":
                return True
            entry = entry.strip("[]").lower()
            if address is not None:
                try:
                    if address in ipaddress.ip_network(entry, strict=False):
                        return True
                except ValueError:
                    pass
                continue
            entry = entry.lstrip(".").rstrip(".")
            if entry and (host == entry or host.endswith("." + entry)):
                return True
        return False
