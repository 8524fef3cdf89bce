# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of shard_staging: learn the shards, plan where they go, write the plan and each node's list."""

import gc
import hashlib
import json
import os
import re
import ssl
import tempfile
import time
import urllib.request
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from urllib.parse import unquote, urlsplit

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.proxy_rules import Proxies, ProxyError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import basic_authorization, redact_url, split_user_info
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.inventory_slices import target_clusters
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.plan import (
    host_shards, host_streamed, make_plan, peer_roles, rank_split)
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.errors import ShardPlanError
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._staging_plan.sources import expand_source, parse_index, shard_records

display = Display()

HEAD_CONCURRENCY = 32
# Shards whose size the planner may learn with a HEAD request each; a dataset with more unknown sizes needs an index.
MAX_HEAD_PROBES = 10_000
# Threads that fsync a batch of written files: an fsync waits on the disk, not the interpreter, so a thousand nodes' list
# files overlap their waits.
SYNC_CONCURRENCY = 8
# List files under plan_dir/lists that no run has named for this long are removed: with signed URLs every run writes new
# ones (a list at 1,000,000 shards is ~170 MB). A run started meanwhile on the same plan_dir renews the lists it names.
LIST_KEEP_SECONDS = 3600


USER_AGENT = "dlinfra.gpu_cluster-shard_plan/1"
_USER_INFO_RE = re.compile(r"://[^/@\s]*@")


class SourceAccess(object):
    """How the planner reaches a dataset's store, as the engine on the nodes does: the dataset's headers and Basic
    credentials (url_username / url_password, else the user info of its source URLs), its proxy (proxy_rules: the
    environment's, read as curl reads it, unless the dataset names one; no_proxy either way) and its CA bundle.
    Credentials go to the store's origin only: a redirect does not carry them."""

    def __init__(self, dataset, user=None, password=None):
        self.headers = dict(dataset.get("headers") or {})
        if dataset.get("url_username"):
            user, password = dataset["url_username"], dataset.get("url_password")
        if user is not None:
            self.headers.setdefault("Authorization", basic_authorization(user, password))
        try:
            self.proxies = Proxies(dataset.get("proxy"))
        except ProxyError as exc:
            raise ShardPlanError("dataset %r: %s" % (dataset.get("name"), exc))
        self.ca_file = dataset.get("ca_file")
        self._context = None

    def open(self, url, method, timeout):
        parts = urlsplit(url)
        proxy = self.proxies.for_origin(parts.scheme, parts.hostname or "")
        if self._context is None and parts.scheme == "https":
            self._context = ssl.create_default_context(cafile=self.ca_file)
        handlers = [urllib.request.ProxyHandler({parts.scheme: "http://%s:%d" % (proxy.host, proxy.port)} if proxy else {}),
                    urllib.request.HTTPSHandler(context=self._context)]
        request = urllib.request.Request(url, method=method, headers={"User-Agent": USER_AGENT})
        for name, value in self.headers.items():
            request.add_unredirected_header(name, value)
        if proxy is not None and proxy.authorization:
            request.add_header("Proxy-Authorization", proxy.authorization)
        return urllib.request.build_opener(*handlers).open(request, timeout=timeout)


def read_url(url, timeout, access=None):
    """The text behind an http(s):// or file:// URL, or a path on the controller."""
    if url.startswith(("http://", "https://")):
        with (access or SourceAccess({})).open(url, "GET", timeout) as response:
            return to_native(response.read())
    path = unquote(urlsplit(url).path) if url.startswith("file://") else url
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def probe_size(url, timeout, access=None):
    """The size of one shard: Content-Length from a HEAD request, or the size of a file:// path seen from the controller."""
    if url.startswith("file://"):
        path = unquote(urlsplit(url).path)
        try:
            return os.stat(path).st_size
        except OSError as exc:
            raise ShardPlanError("shard %s: cannot read its size on the controller (%s); give the dataset an index with sizes "
                                 "when its file:// source is mounted only on the nodes" % (url, exc.strerror))
    try:
        with (access or SourceAccess({})).open(url, "HEAD", timeout) as response:
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
    urls, (user, password) = _without_user_info(dataset, expand_source(dataset["source"]))
    access = SourceAccess(dataset, user, password)
    index = None
    if dataset.get("index"):
        index_url, index_user, index_password = split_user_info(dataset["index"])
        index_access = SourceAccess(dataset, index_user, index_password) if index_user is not None else access
        try:
            text = read_url(index_url, timeout, index_access)
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
            futures = [pool.submit(probe_size, record["url"], timeout, access) for record in unknown]
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


def write_atomically(files):
    """Write each {path: bytes} of ``files`` so that a reader sees either the old file or the whole new one, also after
    a crash: all are written to temporary files first (owner-only: mkstemp), then synced on threads, then renamed."""
    temporaries = []
    try:
        for path, data in files.items():
            directory = os.path.dirname(path)
            os.makedirs(directory, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-")
            temporaries.append((temporary, path))
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
        if temporaries:
            with ThreadPoolExecutor(min(SYNC_CONCURRENCY, len(temporaries))) as pool:
                list(pool.map(_sync, [temporary for temporary, _path in temporaries]))
        for temporary, path in temporaries:
            os.replace(temporary, path)
    except BaseException:
        for temporary, _path in temporaries:
            if os.path.exists(temporary):
                os.unlink(temporary)
        raise


def _sync(path):
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def list_file(plan_dir, shards):
    """(path, bytes) of one node's shard list: stored under its content hash, so an unchanged list is a file kept."""
    data = json.dumps(shards, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return os.path.join(plan_dir, "lists", hashlib.sha256(data).hexdigest() + ".json"), data


def write_lists(plan_dir, by_host, also=None):
    """Store each host's list of ``by_host`` (a cache: check mode may write it) and return {host: its path}. Hosts that
    share one list object share one file, so a replicated plan's list is encoded and hashed once; a file already there
    is only touched (kept by prune_lists for LIST_KEEP_SECONDS more). ``also``: {path: bytes} written in the same batch."""
    encoded, paths, files = {}, {}, {}
    for host, contents in by_host.items():
        if id(contents) not in encoded:
            path, data = list_file(plan_dir, contents)
            encoded[id(contents)] = path
            try:
                os.utime(path)
            except FileNotFoundError:
                files[path] = data
        paths[host] = encoded[id(contents)]
    write_atomically(files | (also or {}))  # ``also`` renamed last: a plan file never names lists not yet in place
    return paths


def write_list(plan_dir, shards):
    """Store one node's shard list (see write_lists) and return its path."""
    return write_lists(plan_dir, {None: shards})[None]


def prune_lists(plan_dir, named, now=None):
    """Remove the list files under plan_dir/lists that are not in ``named`` (this run's) and that no run has named for
    LIST_KEEP_SECONDS; return how many went."""
    directory = os.path.join(plan_dir, "lists")
    now = time.time() if now is None else now
    named = {os.path.abspath(path) for path in named}
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if not entry.name.endswith(".json") or entry.path in named or not entry.is_file(follow_symlinks=False):
            continue
        if now - entry.stat(follow_symlinks=False).st_mtime > LIST_KEEP_SECONDS:
            try:
                os.unlink(entry.path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def node_lists(plan, shards, split=None):
    """What each node's list files hold: ({host: [its shard records, each with its "rank"]}, {host: [{"name", "url",
    "rank"} of the shards it streams]} (empty unless the plan streams). Built for every node in one pass over the plan
    (``host_shards``, ``rank_split``, or the ``split`` make_plan already made), not one pass per node; nodes with the
    same list and rank split share one list object."""
    by_record = {record["name"]: record for record in shards}
    ranks = split or rank_split(plan, {record["name"]: record.get("samples") for record in shards})
    hosts = sorted(plan["nodes"])
    held = _per_host(hosts, host_shards(plan), ranks, lambda shard, rank: dict(by_record[shard], rank=rank))
    streamed = {}
    if plan["mode"] == "stream":
        streamed = _per_host(hosts, host_streamed(plan), ranks,
                             lambda shard, rank: {key: by_record[shard].get(key) for key in ("name", "url", "size", "samples")}
                             | {"rank": rank})
    return held, streamed


def _per_host(hosts, names_by_host, ranks, entry):
    """{host: [entry(name, its rank) for each of its shard names]}, made once for hosts that share one list of names and
    one rank split (every node of a replicated plan): write_lists then encodes and writes it once."""
    made, lists = {}, {}
    for host in hosts:
        names, ranked = names_by_host[host], ranks[host]
        key = (id(names), id(ranked))
        if key not in made:
            made[key] = [entry(shard, ranked[shard]) for shard in names]
        lists[host] = made[key]
    return lists


def peer_url(endpoint):
    address = endpoint["address"]
    return "http://%s:%d" % ("[%s]" % address if ":" in address else address, int(endpoint["port"]))


def peer_configs(dataset, plan, endpoints):
    """Per node: where it listens, which peer it asks for which shard (and that peer's URL), who asks it.

    ``endpoints``: {host: {"address", "port"}} where each node serves its shards to the others.
    """
    roles = peer_roles(plan)
    missing = sorted(host for host in roles if not (endpoints.get(host) or {}).get("address"))
    if missing:
        raise ShardPlanError("dataset %r is staged peer-assisted but %s found no address to serve peers on: set "
                             "shard_staging_peer_address for them (their address on the cluster network), or give the dataset "
                             "peer_assist: false" % (dataset, ", ".join(missing)))
    configs = {}
    for host, role in roles.items():
        upstream = sorted(set(role["sources"].values()))
        configs[host] = {
            "node": host,
            "address": endpoints[host]["address"],
            "port": int(endpoints[host]["port"]),
            "peers": {peer: peer_url(endpoints[peer]) for peer in upstream},
            "sources": role["sources"],
            "downstream": role["downstream"],
        }
    return configs


def plan_dataset(dataset, shards, nodes, plan_dir, endpoints, check_mode, earlier=None):
    """Plan one dataset whose shards are known (``learn_shards``) on ``nodes`` (their room), write its plan (unless
    ``check_mode``), each node's lists and peer configuration, and return what the task reports for it. ``earlier``: a
    plan file to start from when plan_dir holds none yet (see cluster_plan_dir)."""
    # A large plan is hundreds of thousands of small dicts and lists and no reference cycle: the cycle collector
    # would walk them again and again (about 0.5 s of 4.5 at 1,000 nodes x 100,000 shards), so it waits meanwhile.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _plan_dataset(dataset, shards, nodes, plan_dir, endpoints, check_mode, earlier)
    finally:
        if collecting:
            gc.enable()


def _read_plan(path):
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _plan_dataset(dataset, shards, nodes, plan_dir, endpoints, check_mode, earlier):
    name = dataset["name"]
    plan_path = os.path.join(plan_dir, name + ".plan.json")
    previous = _read_plan(plan_path)
    moved = False
    if previous is None and earlier:
        # A plan written before plans were made per cluster: kept as this cluster's where it placed nothing elsewhere,
        # and written to the cluster's directory even when nothing changes.
        found = _read_plan(earlier)
        if found is not None and set(found.get("nodes") or {}) <= set(nodes):
            previous, moved = found, True
    settings = {key: dataset[key] for key in ("name", "mode", "replicas", "headroom", "allow_stream", "stream_cache_fraction",
                                              "peer_assist")
                if dataset.get(key) is not None}
    split = {}
    plan = make_plan(settings, shards, nodes, previous, rank_split_out=split)
    # The plan shows signed URLs' query values as *** (redact_url): its readers need no signature, and a store that signs
    # its URLs afresh for each run does not make every run a change of plan. The node lists keep whole URLs (owner-only
    # files: write_atomically's mkstemp): the nodes fetch with them.
    plan["sources"] = {record["name"]: {"url": redact_url(record["url"]), "sha256": record["sha256"]} for record in shards}
    changes = plan["changes"]
    changed = (previous is None or changes["fetch_copies"] > 0 or changes["remove_copies"] > 0
               or previous.get("sources") != plan["sources"])
    held, streamed = node_lists(plan, shards, split)
    # Checked before anything is written: a plan task that fails here leaves the saved plan as it was.
    peers = peer_configs(name, plan, endpoints)
    # Compact: json's C encoder writes it (a plan of 100,000 shards x 2 copies in 0.6 s instead of 9 s indented).
    plan_file = ({plan_path: json.dumps(plan, sort_keys=True, separators=(",", ":")).encode("utf-8")}
                 if (changed or moved) and not check_mode else {})
    # One batch, keyed by kind and host: a host has a held list, a streamed list and a peer configuration.
    every = {("held", host): contents for host, contents in held.items()}
    every.update({("streamed", host): contents for host, contents in streamed.items()})
    every.update({("peers", host): contents for host, contents in peers.items()})
    paths = write_lists(plan_dir, every, also=plan_file)
    lists, stream_lists, peer_lists = ({host: paths[(kind, host)] for host in source} for kind, source in
                                       (("held", held), ("streamed", streamed), ("peers", peers)))
    return {
        "changed": changed,
        "mode": plan["mode"],
        "headroom": plan["headroom"],
        "transfer": plan["transfer"],
        "peer_lists": peer_lists,
        "summary": plan["summary"],
        "plan_file": plan_path,
        "changes": plan["changes"],
        "nodes": plan["nodes"],
        "lists": lists,
        "stream_lists": stream_lists,
        "mode_reason": plan["mode_reason"],
        "balance": plan["balance"],
        "rank_split_by": plan["rank_split_by"],
        "_before": previous["summary"] if previous else "dataset %s: no plan yet" % name,
    }


def cluster_plan_dir(plan_dir, cluster):
    """Where a cluster's plans and lists go: a directory per cluster group, plan_dir itself for targets in none. Each
    slice of a run sliced by cluster writes its own."""
    return os.path.join(plan_dir, cluster) if cluster else plan_dir


# Per node: what the role's fetch reads, from whichever cluster's plan holds the node.
NODE_KEYS = ("nodes", "lists", "stream_lists", "peer_lists")


def merge_clusters(planned):
    """One dataset's outcome over its clusters' plans ({cluster: plan_dataset's outcome}): the nodes' keys merged, the
    summaries one per line, the changes added up; each cluster's own outcome under "clusters"."""
    def lines(key):
        return "\n".join(("cluster %s: " % cluster if cluster else "") + one[key] for cluster, one in planned.items())

    merged = {"changed": any(one["changed"] for one in planned.values()), "summary": lines("summary"),
              "_before": lines("_before"), "changes": {}, "clusters": {},
              # The dataset's, the same in every cluster's plan.
              "headroom": next(iter(planned.values()))["headroom"]}
    for key in NODE_KEYS:
        merged[key] = {}
    for cluster, one in planned.items():
        for key in NODE_KEYS:
            merged[key].update(one.pop(key))
        for key, value in one["changes"].items():  # counts, and the list of the nodes dropped
            merged["changes"][key] = merged["changes"].get(key, [] if isinstance(value, list) else 0) + value
        one.pop("_before")
        merged["clusters"][cluster] = one
    return merged


def target_ranks(host, read):
    """{"ranks", "ranks_from"} of one target from what the role read there (``RANKS_VAR``): shard_staging_ranks_per_node
    where it is set, else the GPU count of its facts, else 1. A node of the GPU group whose facts count no GPU needs the
    variable."""
    read = read or {}
    given = read.get("set")
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise ShardPlanError("%s: shard_staging_ranks_per_node is %r; it must be a whole number of training ranks (GPUs) "
                                 "on the node, 1 or more" % (host, given))
        return {"ranks": given, "ranks_from": "shard_staging_ranks_per_node"}
    gpus = read.get("gpus")
    if gpus is not None and int(gpus) >= 1:
        return {"ranks": int(gpus), "ranks_from": "nvidia_gpu_facts"}
    if gpus is not None and read.get("gpu_group"):
        raise ShardPlanError("%s: it is in shard_staging_gpu_group but nvidia_gpu_facts counts no GPU there, and "
                             "shard_staging_ranks_per_node is unset: set shard_staging_ranks_per_node for it (the ranks that "
                             "read its shards), bring its GPUs back, or take it out of shard_staging_targets" % host)
    return {"ranks": 1, "ranks_from": "default"}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("datasets", "targets", "plan_dir", "timeout", "cluster_group_pattern"))
    # Each target's room, as the role's probe left it: {"reserve_bytes": N, "results": [shard_space results], "plan_dir":
    # its shard_staging_plan_dir}.
    ROOM_VAR = "__shard_staging_room"
    # Where each target serves its shards to the others (peer-assisted staging): {"address": ..., "port": N}.
    PEER_VAR = "__shard_staging_peer_endpoint"
    # Each target's training ranks as the role's probe read them: {"set": shard_staging_ranks_per_node, "gpus": the
    # GPU count of its nvidia_gpu_facts or None, "gpu_group": whether it is in shard_staging_gpu_group}.
    RANKS_VAR = "__shard_staging_ranks"

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        datasets, targets, plan_dir = args.get("datasets"), args.get("targets"), args.get("plan_dir")
        timeout = args.get("timeout", 30)
        if not isinstance(datasets, list) or not isinstance(targets, list) or not targets or not plan_dir:
            raise AnsibleActionFail("shard_plan needs datasets (a list), targets (a non-empty list of hosts) and plan_dir")
        space = {host: self._room(task_vars["hostvars"].get(host, {})) for host in targets}
        try:
            ranks = {host: target_ranks(host, task_vars["hostvars"].get(host, {}).get(self.RANKS_VAR)) for host in targets}
        except ShardPlanError as exc:
            raise AnsibleActionFail(to_native(exc))
        for host in targets:
            for room in space[host].values():
                room.update(ranks[host])
        self._endpoints = {host: task_vars["hostvars"].get(host, {}).get(self.PEER_VAR) for host in targets}
        pattern = args.get("cluster_group_pattern")
        clusters = target_clusters(targets, task_vars.get("groups") or {}, pattern) if pattern else {"": list(targets)}
        # Each cluster's plans go where its first target's plan_dir says (its default follows the inventory source that
        # defines the host): a run over several clusters and a run sliced by cluster find them in the same place.
        bases = {cluster: os.path.abspath(os.path.expanduser(
                 (task_vars["hostvars"].get(hosts[0], {}).get(self.ROOM_VAR) or {}).get("plan_dir") or plan_dir))
                 for cluster, hosts in clusters.items()}
        result.update(changed=False, datasets={})
        diff_before, diff_after = [], []
        for dataset in datasets:
            name = dataset["name"]
            try:
                planned = self._plan_one(dataset, space, clusters, bases, timeout)
            except ShardPlanError as exc:
                # A message may quote a source pattern as the user wrote it: its user info never reaches the output.
                raise AnsibleActionFail(_USER_INFO_RE.sub("://***@", to_native(exc)))
            result["datasets"][name] = planned
            result["changed"] = result["changed"] or planned["changed"]
            diff_before.append(planned.pop("_before"))
            diff_after.append(planned["summary"])
        if not self._task.check_mode:
            named = [path for planned in result["datasets"].values()
                     for key in ("lists", "stream_lists", "peer_lists") for path in planned[key].values()]
            for cluster, base in bases.items():
                prune_lists(cluster_plan_dir(base, cluster), named)
        result["msg"] = "\n".join(diff_after)
        # Shown on every run, as the fetch's progress is: where the data goes is what the user wants to see.
        display.display(result["msg"])
        if self._task.diff:
            result["diff"] = {"before": "\n".join(diff_before) + "\n", "after": "\n".join(diff_after) + "\n",
                              "before_header": "previous plans", "after_header": "new plans"}
        return result

    def _room(self, hostvars):
        """{dataset: {free_bytes, held_bytes, total_bytes[, ours_bytes]}} of one target, its reserve taken off; {} if it
        never reported."""
        room = hostvars.get(self.ROOM_VAR) or {}
        reserve = int(room.get("reserve_bytes") or 0)
        return {result["item"]["name"]: self._less_reserve(result, reserve) for result in room.get("results", []) if "free_bytes" in result}

    @staticmethod
    def _less_reserve(result, reserve):
        """One shard_space result with ``reserve`` taken off. The planner weighs a node by free + ours (shard_space's
        ours_bytes), which a killed staging run cannot change; so is the reserve: the part that free (which the run did
        lower) cannot cover comes off ours, and free + ours is max(0, free + ours - reserve) however far a run got.
        A report without ours_bytes (an older shard_space) is planned on free + held as before."""
        free = int(result["free_bytes"])
        info = {"free_bytes": max(0, free - reserve), "held_bytes": result["held_bytes"], "total_bytes": result["total_bytes"]}
        if result.get("ours_bytes") is not None:
            info["ours_bytes"] = max(0, int(result["ours_bytes"]) - max(0, reserve - free))
        return info

    def _plan_one(self, dataset, space, clusters, bases, timeout):
        """Each cluster's plan of one dataset, its shards learned once; the nodes' lists and figures of all of them."""
        name = dataset["name"]
        shards = None
        planned = {}
        for cluster, hosts in clusters.items():
            nodes = {}
            for host in sorted(hosts):
                room = (space[host] or {}).get(name)
                if not room:
                    raise ShardPlanError("dataset %r: no space report from target %s: it is unreachable or failed earlier; bring it "
                                         "back or remove it from shard_staging_targets" % (name, host))
                nodes[host] = room
            if shards is None:
                shards = learn_shards(dataset, timeout)
            planned[cluster] = plan_dataset(dataset, shards, nodes, cluster_plan_dir(bases[cluster], cluster), self._endpoints,
                                            self._task.check_mode,
                                            earlier=os.path.join(bases[cluster], name + ".plan.json") if cluster else None)
        return merge_clusters(planned)
