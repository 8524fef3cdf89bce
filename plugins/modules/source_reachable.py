#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: source_reachable
short_description: Check that a host reaches the places a role downloads from, naming the variables that fix it
version_added: 0.1.0
description:
  - Asks each source for its headers (HEAD; a GET whose body is not read where the server refuses HEAD) the way the
    role's download will go, and fails, before the role changes anything, when one does not answer.
  - The message names the host, the role, each source that did not answer with its URL and error, and what to set
    (O(fix)). On a host without a route out that is a mirror or a file the role reads instead of the vendor's URL.
  - Credentials in a URL (user info, query values) are shown as C(***).
  - The action plugin fills O(context) with the role's name and the host's.
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes.read_only
options:
  sources:
    description: What the role will download, in the order it will.
    type: list
    elements: dict
    required: true
    suboptions:
      url:
        description: The URL (http or https).
        type: str
        required: true
      what:
        description: What it is, as the message names it (for example C(NVIDIA's container toolkit repository)).
        type: str
        required: true
      route:
        description:
          - C(direct) goes as ansible.builtin.get_url does, through the proxy the task's environment names (C(http_proxy),
            C(https_proxy), C(all_proxy), C(no_proxy), read as curl reads them) or none.
          - C(apt) goes as apt does, through the proxy apt is configured with (C(Acquire::http::Proxy),
            C(Acquire::https::Proxy)), or as C(direct) where none is.
        type: str
        choices: [direct, apt]
        default: direct
  timeout:
    description: Seconds to wait for each source's answer.
    type: int
    default: 10
  fix:
    description: What to set so that the host reaches the sources, for the message.
    type: str
    required: true
  context:
    description: Who is asking, at the start of the message (the action plugin sets C(ROLE on HOST)).
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Check that NVIDIA's container toolkit repository answers
  dlinfra.gpu_cluster.source_reachable:
    sources:
      - url: https://nvidia.github.io/libnvidia-container/gpgkey
        what: the repository's signing key
      - url: https://nvidia.github.io/libnvidia-container/stable/deb/amd64/InRelease
        what: the repository
        route: apt
    fix: set nvidia_container_toolkit_repo_mirror to a mirror of the repository this host can reach
"""

RETURN = r"""
sources:
  description: Each source as asked, with its answer.
  returned: always
  type: list
  elements: dict
  contains:
    url:
      description: The URL, credentials as C(***).
      type: str
    what:
      description: As given.
      type: str
    route:
      description: C(direct), or C(apt).
      type: str
    proxy:
      description: The proxy the request went through (credentials as C(***)), C('') for none.
      type: str
    status:
      description: The HTTP status of the answer, C(0) where none came.
      type: int
    error:
      description: Why the source does not count as reached, C('') where it does.
      type: str
"""

import os
import re
import ssl

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import PermanentError, TransientError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.http import Connections, open_url
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.proxy_rules import Proxies, ProxyError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import redact_url

APT_PROXY = re.compile(r'^Acquire::(https?)::Proxy "([^"]*)";$')
# The environment's proxy variables, as proxy_rules reads them.
PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY")
USER_AGENT = "dlinfra.gpu_cluster-source_reachable/1"
# A HEAD refused with one of these is asked again with GET.
_NO_HEAD = (403, 405, 501)


def apt_proxies(dump):
    """{'http': url, 'https': url} from `apt-config dump`, as apt reads them: https falls back to http; DIRECT is none."""
    found = {}
    for line in dump.splitlines():
        match = APT_PROXY.match(line.strip())
        if match:
            found[match.group(1)] = match.group(2)
    found.setdefault("https", found.get("http", ""))
    return {scheme: ("" if value.upper() == "DIRECT" else value) for scheme, value in found.items()}


def chosen_proxy(url, setting=None):
    """(the proxy URL a request to url goes through, '' for none; an error, '' for none). setting None: the environment's
    proxy variables; else that proxy ('' for none). Decided as the staging engine decides it, the way curl does
    (module_utils/proxy_rules.py): no_proxy applies either way."""
    try:
        proxy = Proxies(setting, os.environ).for_url(url)
    except ProxyError as error:
        return "", str(error)
    return (proxy.address if proxy else ""), ""


def ask(url, timeout, proxy):
    """(status, error) of a HEAD to url through proxy ('' for none), a GET whose body is not read where the server
    refuses HEAD; redirects followed. Asked with the nodes' HTTP client (module_utils/_staging/http.py)."""
    # The proxy chosen_proxy chose, for the redirects too: an environment of none but it.
    conns = Connections(timeout, ssl.create_default_context, Proxies(proxy, environ={}))
    try:
        for method in ("HEAD", "GET"):
            try:
                response, _origin = open_url(url, {"User-Agent": USER_AGENT}, conns, method=method)
            except (TransientError, PermanentError) as error:
                if str(error) == "timed out":
                    return 0, "no answer within %d s (%s)" % (timeout, error)
                return 0, str(error)
            if 200 <= response.status < 300:
                return response.status, ""
            if method == "HEAD" and response.status in _NO_HEAD:
                continue
            return response.status, "it answered HTTP %d %s" % (response.status, response.reason)
    finally:
        conns.close()
    return 0, "no answer"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sources=dict(type="list", elements="dict", required=True, options=dict(
                url=dict(type="str", required=True),
                what=dict(type="str", required=True),
                route=dict(type="str", choices=["direct", "apt"], default="direct"),
            )),
            timeout=dict(type="int", default=10),
            fix=dict(type="str", required=True),
            context=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    apt = None
    results = []
    for source in module.params["sources"]:
        url = source["url"]
        if not re.match(r"^https?://", url):
            who = module.params["context"] or "source_reachable"
            module.fail_json(msg="%s: %s is not an http(s) URL (%s)" % (who, redact_url(url), source["what"]))
        setting = None  # the environment's
        if source["route"] == "apt":
            if apt is None:
                apt_config = module.get_bin_path("apt-config")
                dump = module.run_command([apt_config, "dump"])[1] if apt_config else ""
                apt = apt_proxies(dump)
            setting = apt.get(url.partition(":")[0].lower()) or None
        proxy, error = chosen_proxy(url, setting)
        status, error = (0, error) if error else ask(url, module.params["timeout"], proxy)
        results.append(dict(url=redact_url(url), what=source["what"], route=source["route"], proxy=redact_url(proxy),
                            status=status, error=error))
    unreachable = [r for r in results if r["error"]]
    if unreachable:
        lines = "; ".join("%s, %s%s: %s" % (r["what"], r["url"], " through the proxy %s" % r["proxy"] if r["proxy"] else "", r["error"])
                          for r in unreachable)
        module.fail_json(msg="%s: cannot reach %s. Nothing was changed by this check. %s"
                         % (module.params["context"] or "source_reachable", lines, module.params["fix"]), sources=results)
    module.exit_json(changed=False, sources=results)


if __name__ == "__main__":
    main()
