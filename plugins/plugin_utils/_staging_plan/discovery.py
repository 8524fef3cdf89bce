# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: learn a dataset's shards on the controller: its source expanded, its index read, the sizes it lacks asked with
HEAD requests, the way the engine on the nodes reaches the store. May change without notice."""

import os
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from urllib.parse import unquote, urlsplit

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.proxy_rules import ProxyError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import redact_url, split_user_info
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.http_client import HttpClient, read_url
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.sources import expand_source, parse_index, shard_records

HEAD_CONCURRENCY = 32
# Shards whose size the planner may learn with a HEAD request each; a dataset with more unknown sizes needs an index.
MAX_HEAD_PROBES = 10_000
USER_AGENT = "dlinfra.gpu_cluster-shard_plan/1"


def dataset_client(dataset, user=None, password=None):
    """The HttpClient that reaches a dataset's store as the engine on the nodes does: the dataset's headers and Basic
    credentials (url_username / url_password, else ``user`` / ``password``: the user info of its source URLs), its proxy
    (the environment's, read as curl reads it, unless the dataset names one; no_proxy either way) and its CA bundle."""
    if dataset.get("url_username"):
        user, password = dataset["url_username"], dataset.get("url_password")
    try:
        return HttpClient(dataset.get("headers"), user, password, dataset.get("proxy"), dataset.get("ca_file"), USER_AGENT)
    except ProxyError as exc:
        raise ShardPlanError("dataset %r: %s" % (dataset.get("name"), exc))


def probe_size(url, timeout, client=None):
    """The size of one shard: Content-Length from a HEAD request, or the size of a file:// path seen from the controller."""
    if url.startswith("file://"):
        path = unquote(urlsplit(url).path)
        try:
            return os.stat(path).st_size
        except OSError as exc:
            raise ShardPlanError("shard %s: cannot read its size on the controller (%s); give the dataset an index with sizes "
                                 "when its file:// source is mounted only on the nodes" % (url, exc.strerror))
    try:
        with (client or dataset_client({})).open(url, "HEAD", timeout) as response:
            length = response.headers.get("Content-Length")
    except Exception as exc:  # urllib raises HTTPError, URLError, socket and SSL errors alike
        raise ShardPlanError("shard %s: HEAD request failed (%s); check the URL or give the dataset an index with sizes"
                             % (redact_url(url), exc))
    if length is None or not length.isdigit():
        raise ShardPlanError("shard %s: the server sent no Content-Length; give the dataset an index with sizes" % redact_url(url))
    return int(length)


def _without_user_info(dataset, urls):
    """The URLs without user info, and the one (user, password) they carried (None, None if none): the plan, the lists and
    the messages never hold a secret; the role hands the credentials to the nodes with no_log."""
    stripped, found = [], set()
    for url in urls:
        plain, user, password = split_user_info(url)
        stripped.append(plain)
        if user is not None:
            found.add((user, password))
    if len(found) > 1:
        raise ShardPlanError("dataset %r: its source URLs carry different user info; give the dataset url_username and "
                             "url_password instead" % dataset["name"])
    return stripped, (found.pop() if found else (None, None))


def learn_shards(dataset, timeout):
    """The dataset's shard records (sources.shard_records), each with its size: from the index, else asked."""
    urls, (user, password) = _without_user_info(dataset, expand_source(dataset["source"]))
    client = dataset_client(dataset, user, password)
    index = None
    if dataset.get("index"):
        index_url, index_user, index_password = split_user_info(dataset["index"])
        index_client = dataset_client(dataset, index_user, index_password) if index_user is not None else client
        try:
            text = read_url(index_url, timeout, index_client)
        except Exception as exc:  # urllib and open raise HTTP, URL, socket and OS errors alike
            raise ShardPlanError("dataset %r: cannot read its index %s (%s); check the URL or path"
                                 % (dataset["name"], redact_url(dataset["index"]), exc))
        index = parse_index(text, origin=redact_url(dataset["index"]))
    records = shard_records(urls, index)
    unknown = [record for record in records if record["size"] is None]
    if len(unknown) > MAX_HEAD_PROBES:
        raise ShardPlanError("dataset %r: %d shards have no size in an index, and the planner asks at most %d of them with HEAD "
                             "requests; give the dataset an index with sizes (a wids-shard-index-v1 JSON with filesize)"
                             % (dataset["name"], len(unknown), MAX_HEAD_PROBES))
    if unknown:
        with ThreadPoolExecutor(HEAD_CONCURRENCY) as pool:
            futures = [pool.submit(probe_size, record["url"], timeout, client) for record in unknown]
            done, _pending = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((future for future in futures if future in done and future.exception() is not None), None)
            if failed is not None:
                # The first failure ends the probing: the queued requests are dropped, not sent.
                for future in futures:
                    future.cancel()
                raise failed.exception()
            for record, future in zip(unknown, futures):
                record["size"] = future.result()
    return records
