# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Credentials in and for URLs: a URL as it may be shown (its secrets as ``***``), a URL's user info taken out, and the
header value of HTTP Basic authentication. The planner on the controller, the checks of a store's reachability and the
engine on the nodes use this module."""

import base64
from urllib.parse import unquote, urlsplit, urlunsplit


def redact_url(url):
    """url as it may be shown, returned or written: its user info as ``***`` and the value of every query parameter as
    ``***`` (signed URLs carry their signature there). URLs without either come back unchanged."""
    if not isinstance(url, str) or ("@" not in url and "?" not in url):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a URL that cannot be parsed>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = "&".join(item.partition("=")[0] + ("=***" if "=" in item else "") for item in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def split_user_info(url):
    """(url without its user info, user, password): user and password percent-decoded, None when the URL has none."""
    if not isinstance(url, str) or "@" not in url:
        return url, None, None
    parts = urlsplit(url)
    if parts.username is None:
        return url, None, None
    netloc = parts.netloc.rpartition("@")[2]
    return (urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)), unquote(parts.username),
            unquote(parts.password) if parts.password is not None else None)


def basic_authorization(username, password):
    """The Authorization header value of HTTP Basic authentication (RFC 7617, UTF-8)."""
    return "Basic " + base64.b64encode(("%s:%s" % (username, password or "")).encode("utf-8")).decode("ascii")
