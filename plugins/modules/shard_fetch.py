#!/usr/bin/python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: shard_fetch
short_description: Stage a node's dataset shards onto local disk, verified, resumable and prunable
description:
  - Fetches the dataset shards assigned to this node (for example WebDataset C(.tar) shards) from
    C(http://), C(https://) or C(file://) URLs into O(dest), several at a time over keep-alive connections.
  - Each shard is received into a hidden C(.NAME.part) file, checked against its size and sha256,
    made durable and only then renamed to its final name, so readers that glob C(*.tar) never see a partial shard.
    Shards up to 8 MiB are made durable in batches with one C(syncfs) each (Linux 5.8 or later on ext4, xfs,
    btrfs or f2fs); larger ones, and all shards elsewhere, with one C(fsync) each.
  - An interrupted transfer resumes with an HTTP Range request when the source still has the same ETag
    (or Last-Modified) and size; otherwise it starts again from the first byte.
  - A journal in O(dest) records every staged shard (size, mtime, sha256, source validator). A re-run
    confirms staged shards from one directory scan without reading them, and O(prune) only ever removes
    shards that this module staged. When O(shards_file) holds the same bytes as the last run that left every
    shard staged, the re-run compares the journal with the scan without parsing the list.
  - Names C(.NAME.part), C(.NAME.part.state), C(.shard_fetch.journal), C(.shard_fetch.lock), C(.shard_fetch.progress) and
    C(.shard_fetch.last_run) in O(dest) belong to this module. C(.shard_fetch.last_run) records the last run's start, end,
    result and shards held against listed, for the gpu_monitoring role's collector.
  - One failing shard does not stop the others; the task fails at the end listing every failed shard
    with its URL and the reason. Unusable O(dest) and too little free space fail before anything is fetched.
version_added: 0.1.0
author:
  - dlinfra.gpu_cluster maintainers (@dlinfra)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - dlinfra.gpu_cluster.attributes
attributes:
  check_mode:
    support: full
    details: Reports what would be fetched and removed; it reads and hashes files where O(verify) asks for it, and writes nothing.
options:
  dest:
    description:
      - Directory to stage the shards in. It is created when missing.
    type: path
    required: true
  shards:
    description:
      - The shards this node holds, inline. Use O(shards_file) for long lists.
      - Mutually exclusive with O(shards_file); one of the two is required.
    type: list
    elements: dict
    suboptions:
      name:
        description:
          - File name of the shard in O(dest). A plain name, not starting with C(.).
        type: str
        required: true
      url:
        description:
          - Where to fetch the shard from; C(http://), C(https://) or C(file://) (for example an NFS mount).
        type: str
        required: true
      size:
        description:
          - Size in bytes. Checked while the shard is received, and used for the free-space check.
        type: int
      sha256:
        description:
          - Expected sha256 of the whole shard, as 64 hex digits.
          - Without it a corrupt transfer with the right size cannot be detected, and a file found under the
            shard's name that the journal does not know is fetched again rather than verified.
        type: str
  shards_file:
    description:
      - Path on the managed node of a JSON file holding the shard list, either a list of objects with the keys
        of O(shards) or an object with a C(shards) list. This is how lists of many thousands of shards are passed.
    type: path
  shards_src:
    description:
      - Path on the controller of a JSON shard list (as for O(shards_file)). The module's action plugin copies it
        to the node's temporary directory for this run only, so the list never becomes a managed file.
      - Mutually exclusive with O(shards) and O(shards_file).
    type: path
  streamed_file:
    description:
      - Path on the node of a JSON list of shards (C(name), C(url)) this node reads straight from their source (stream
        mode); nothing is fetched for them, and the hand-off lists name their URLs. A prune removes local copies of them.
    type: path
  streamed_src:
    description:
      - Path on the controller of such a list; the action plugin copies it to the node's temporary directory for this run
        only, as for O(shards_src).
    type: path
  peer_file:
    description:
      - Path on the node of a JSON object that makes this run peer-assisted, as the role's planner writes it
        (C(node), C(address), C(port), C(peers), C(sources), C(downstream)). The shards that C(sources) names are asked
        for from that peer (by C(peers), its URL) first, and from their source only when the peer will not have them, stopped
        answering for 30 seconds (never answered, for O(peer_wait)), or sent bytes that failed their sha256; every transfer is verified and published as
        from the source. When C(downstream) names nodes, this node serves them its own staged shards on C(address):C(port)
        while the run lasts, and until they say they are done (or nobody asked for anything for O(peer_linger) seconds).
      - Ignored in check mode.
    type: path
  peer_src:
    description:
      - Path on the controller of such an object; the action plugin copies it to the node's temporary directory for this run
        only, as for O(shards_src).
    type: path
  peer_token:
    description:
      - The run's shared secret; the peers' requests must carry it. At least 16 characters; required with O(peer_file).
    type: str
  peer_hosts:
    description:
      - The nodes of the run that are still in the play. A peer not among them (it failed earlier) is neither asked for shards
        nor waited for; this node takes those shards from their source at once.
      - Default, every node the peer file names.
    type: list
    elements: str
  peer_wait:
    description:
      - Seconds a shard waits for the peer that is fetching it before this node takes it from its source instead.
    type: float
    default: 300
  peer_linger:
    description:
      - Seconds this node keeps serving, after its own shards are done, without any request from the nodes that have not
        said they are done.
    type: float
    default: 60
  handoff_ranks:
    description:
      - When set, and every shard is in place, write the lists a training job reads into O(dest)
        C(shards.txt) (what to read, one per line; local paths, and the URLs of the shards in O(streamed_file)),
        C(sources.txt) (every shard's URL) and C(ranks/rank-NNNN.txt) for this many ranks (disjoint round-robin parts
        of C(shards.txt)).
      - Each file is replaced atomically, and only when its content changes; rank files beyond this number are removed.
    type: int
  handoff_world:
    description:
      - With O(handoff_ranks), also write C(world.json) into O(dest), this node's place in the training world of its
        cluster's plan as the role's plan gives it per node (C(node_rank), C(nodes), C(world_size), C(rendezvous),
        C(ranks) with each list's C(local_rank), C(global_rank) and C(list), C(epoch) and C(plan_digest)).
      - Written like the lists, atomically and only when it changes.
    type: dict
  concurrency:
    description:
      - Number of shards transferred in parallel.
    type: int
    default: 8
  retries:
    description:
      - How many times a shard is retried after a server error (5xx, 408, 429), a connection error or a
        truncated body, with exponential backoff starting at one second. A 4xx answer is not retried;
        a sha256 or size mismatch is retried once.
    type: int
    default: 5
  timeout:
    description:
      - Seconds to wait for a connection or for data before the attempt counts as failed.
    type: float
    default: 60.0
  bandwidth_limit:
    description:
      - Limit, in bytes per second, for all transfers of this node together. Unlimited when not set.
    type: int
  verify:
    description:
      - V(quick) trusts a staged shard whose size and mtime match the journal.
      - V(full) re-reads every staged shard, checks its sha256, and fetches again any that fails.
    type: str
    choices: [quick, full]
    default: quick
  prune:
    description:
      - Remove shards that this module staged in O(dest) and that are no longer in the list.
      - Happens only after every listed shard is in place; nothing is removed when any shard failed.
        Files the module did not stage, or that changed since it staged them, are never removed.
    type: bool
    default: false
  journal:
    description:
      - Path of the journal. Defaults to C(.shard_fetch.journal) in O(dest). One journal belongs to one O(dest).
    type: path
  report_limit:
    description:
      - At most this many names are returned in RV(fetched_names) and RV(removed_names).
    type: int
    default: 20
  progress_interval:
    description:
      - While shards are transferred, the module rewrites a small JSON file C(.shard_fetch.progress) in O(dest) at most this
        often (seconds), with the shards and bytes done of this run's total, the current rate and the counts so far. It is removed when
        the run ends; P(dlinfra.gpu_cluster.shard_fetch_wait#module) shows it while it waits.
    type: float
    default: 5
  progress_id:
    description:
      - An id for this run, written into the progress file so that the poller that started the run knows it is this run's
        (and not a file a killed run left behind).
    type: str
  if_locked:
    description:
      - What to do when an earlier run still stages into O(dest) (its play was interrupted and left the fetch running).
      - V(wait) waits for it to end, then goes on from where it left O(dest); V(stop) ends it (SIGTERM, SIGKILL after 30 s;
        its journal keeps what it staged) and goes on; V(fail) stops at once, naming the lock.
    type: str
    choices: [wait, stop, fail]
    default: fail
  headers:
    description:
      - Extra request headers for the sources (never for peers), e.g. V(Authorization) with a bearer token. They go to the
        source URL's origin only and are dropped on a redirect to another host. Never logged.
    type: dict
  url_username:
    description:
      - User for HTTP Basic authentication at the sources. A source URL's own user info (V(http://user:password@store/...))
        is used the same way. Reported URLs show credentials as V(***).
    type: str
  url_password:
    description: Password for O(url_username). Never logged.
    type: str
  proxy:
    description:
      - HTTP proxy for the sources, V(http://[user:password@]host:port); HTTPS goes through it with CONNECT. Unset, the
        environment's C(http_proxy) / C(https_proxy) / C(all_proxy) apply; V("") means no proxy. C(no_proxy) applies either
        way, matched as curl matches it. Peers are always reached directly. Never logged (it may hold a password).
    type: str
  ca_file:
    description:
      - A PEM bundle of the CA certificates that verify the sources' TLS certificates (a private CA), instead of the
        system's. A certificate that fails verification fails its shards at once, naming the host.
    type: path
  access_file:
    description:
      - A JSON object on the node with any of O(headers), O(url_username), O(url_password), O(proxy) and O(peer_token),
        which the module reads and removes as it starts. The action plugin writes it (mode 0600, in the node's
        temporary directory for this run) from those options, so that they are not in an async job's payload, which
        stays on the node's disk as long as the fetch runs.
      - Give it or those options, not both.
    type: path
notes:
  - Runs on the managed node with the Python standard library only.
  - O(verify=quick) does not notice a staged shard whose bytes were changed in place without a change of
    size or mtime; use O(verify=full) to find such damage.
  - C(file://) sources are copied with C(copy_file_range) where the kernel allows it, and always restart
    from the first byte rather than resume.
"""

EXAMPLES = r"""
- name: Stage two shards given inline
  dlinfra.gpu_cluster.shard_fetch:
    dest: /mnt/ssd/datasets/yt8m
    shards:
      - name: chunks-000000.tar
        url: http://store.example.com/yt8m/chunks-000000.tar
        size: 1073741824
        sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
      - name: chunks-000001.tar
        url: http://store.example.com/yt8m/chunks-000001.tar

- name: Stage this node's share of a large dataset and drop shards it no longer holds
  dlinfra.gpu_cluster.shard_fetch:
    dest: /mnt/ssd/datasets/yt8m
    shards_file: /var/lib/shard_staging/yt8m.json
    concurrency: 16
    bandwidth_limit: 500000000
    prune: true
  register: staged

- name: Re-hash everything that is staged and repair what is damaged
  dlinfra.gpu_cluster.shard_fetch:
    dest: /mnt/ssd/datasets/yt8m
    shards_file: /var/lib/shard_staging/yt8m.json
    verify: full
"""

RETURN = r"""
earlier_run:
  description: What an earlier run still staging into O(dest) cost this one (see O(if_locked)), or null when there was none.
  returned: always
  type: dict
  sample: {pid: 4242, waited: 81.5, stopped: false}
fetched:
  description: Number of shards fetched (in check mode, that would be fetched).
  returned: always
  type: int
  sample: 120
fetched_bytes:
  description:
    - Bytes received from the sources in this run, retries included; resumed shards count only the rest.
    - In check mode, the total size of the shards that would be fetched (where their size is known).
  returned: always
  type: int
  sample: 128849018880
fetched_names:
  description: Names of fetched shards (would be fetched, in check mode), at most O(report_limit) of them.
  returned: always
  type: list
  elements: str
  sample: [chunks-000000.tar, chunks-000001.tar]
resumed:
  description: Number of fetched shards that continued a partial transfer from an earlier run.
  returned: always
  type: int
  sample: 1
confirmed:
  description: Number of shards already staged and confirmed, by the journal or by their sha256.
  returned: always
  type: int
  sample: 880
verified:
  description: Number of staged files whose sha256 was computed in this run.
  returned: always
  type: int
  sample: 0
repaired:
  description: Number of staged files that failed verification and were fetched again.
  returned: always
  type: int
  sample: 0
removed:
  description: Number of shards removed by O(prune) (that would be removed, in check mode).
  returned: always
  type: int
  sample: 3
removed_bytes:
  description: Bytes freed by O(prune).
  returned: always
  type: int
  sample: 3221225472
removed_names:
  description: Names of removed shards, at most O(report_limit) of them.
  returned: always
  type: list
  elements: str
  sample: [chunks-000999.tar]
failed_shards:
  description:
    - The shards that could not be staged, each with its name, URL and the reason.
    - Called C(failed_shards) because C(failed) is the task's own status.
  returned: always
  type: list
  elements: dict
  sample: [{name: chunks-000007.tar, url: http://store.example.com/yt8m/chunks-000007.tar, reason: HTTP 404 Not Found}]
errors:
  description: Problems that are not about one shard, such as a journal that could not be written.
  returned: always
  type: list
  elements: str
  sample: []
total:
  description: Number of shards in the list.
  returned: always
  type: int
  sample: 1000
elapsed:
  description: Seconds the whole run took.
  returned: always
  type: float
  sample: 83.2
throughput:
  description: Bytes per second received while transfers ran; 0 when nothing was transferred and in check mode.
  returned: always
  type: float
  sample: 1548823040.5
handoff_changed:
  description: The hand-off files (relative to O(dest)) written or removed (that would be, in check mode).
  returned: when O(handoff_ranks) is set
  type: list
  elements: str
  sample: [shards.txt, ranks/rank-0000.txt]
peers:
  description:
    - Peer-assisted runs only. C(source_bytes) and C(peer_bytes) received from sources and from peers, C(from_peers) bytes per
      peer, C(served_bytes) sent to peers, C(bad_data) the peers that sent bytes which failed their sha256 (C(peer), C(name),
      C(reason)), C(given_up) the peers given up on and why, C(waited_out) per peer the shards that waited O(peer_wait)
      seconds for it and then came from the source, C(not_done) the downstream nodes that never said they were done.
  returned: when O(peer_file) is set and not in check mode
  type: dict
  sample: {source_bytes: 1073741824, peer_bytes: 3221225472, from_peers: {gpu2: 1073741824}, served_bytes: 3221225472,
           bad_data: [], given_up: {}, waited_out: {}, not_done: []}
from_peers:
  description: Number of fetched shards that came from a peer.
  returned: always
  type: int
  sample: 90
journal:
  description: Path of the journal.
  returned: always
  type: str
  sample: /mnt/ssd/datasets/yt8m/.shard_fetch.journal
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import StagingError
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.handoff import write_handoff
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.input import (
    ACCESS_OPTIONS, ShardListFile, load_peer_file, load_shards_file, normalize_shards)
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.transfer import stage

FAILURES_IN_MESSAGE = 20


def _failure_message(result, dest):
    failed = result["failed_shards"]
    lines = ["%s (%s): %s" % (item["name"], item["url"], item["reason"]) for item in failed[:FAILURES_IN_MESSAGE]]
    if len(failed) > FAILURES_IN_MESSAGE:
        lines.append("and %d more, see failed_shards" % (len(failed) - FAILURES_IN_MESSAGE))
    parts = []
    if failed:
        parts.append("%d of %d shards could not be staged in %s; staged shards were left as they are: %s"
                     % (len(failed), result["total"], dest, "; ".join(lines)))
    parts.extend(result["errors"])
    return ". ".join(parts)


def without_lost_peers(peer, alive):
    """The peer settings without the nodes that have left the play: nothing is asked of them, nobody waits for them."""
    alive = set(alive)
    peer = dict(peer)
    if isinstance(peer.get("peers"), dict):
        peer["peers"] = dict((name, url) for name, url in peer["peers"].items() if name in alive)
    if isinstance(peer.get("sources"), dict):
        peer["sources"] = dict((shard, name) for shard, name in peer["sources"].items() if name in alive)
    if isinstance(peer.get("downstream"), list):
        peer["downstream"] = [name for name in peer["downstream"] if name in alive]
    return peer


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            shards=dict(type="list", elements="dict", options=dict(
                name=dict(type="str", required=True),
                url=dict(type="str", required=True),
                size=dict(type="int"),
                sha256=dict(type="str"),
            )),
            shards_file=dict(type="path"),
            shards_src=dict(type="path"),
            streamed_file=dict(type="path"),
            streamed_src=dict(type="path"),
            peer_file=dict(type="path"),
            peer_src=dict(type="path"),
            peer_token=dict(type="str", no_log=True),
            peer_hosts=dict(type="list", elements="str"),
            peer_wait=dict(type="float", default=300.0),
            peer_linger=dict(type="float", default=60.0),
            handoff_ranks=dict(type="int"),
            handoff_world=dict(type="dict"),
            concurrency=dict(type="int", default=8),
            retries=dict(type="int", default=5),
            timeout=dict(type="float", default=60.0),
            bandwidth_limit=dict(type="int"),
            verify=dict(type="str", default="quick", choices=["quick", "full"]),
            prune=dict(type="bool", default=False),
            journal=dict(type="path"),
            report_limit=dict(type="int", default=20),
            progress_interval=dict(type="float", default=5.0),
            progress_id=dict(type="str"),
            if_locked=dict(type="str", choices=["wait", "stop", "fail"], default="fail"),
            headers=dict(type="dict", no_log=True),
            url_username=dict(type="str"),
            url_password=dict(type="str", no_log=True),
            proxy=dict(type="str", no_log=True),
            ca_file=dict(type="path"),
            access_file=dict(type="path"),
        ),
        mutually_exclusive=[("shards", "shards_file", "shards_src")],
        required_one_of=[("shards", "shards_file", "shards_src")],
        supports_check_mode=True,
    )
    params = module.params
    if params["access_file"] is not None:
        _read_access_file(module, params)
    if params["peer_file"] is not None and not params["peer_token"]:
        module.fail_json(msg="missing parameter(s) required by 'peer_file': peer_token")
    if any(params[option] is not None for option in ("shards_src", "streamed_src", "peer_src")):
        module.fail_json(msg="shards_src, streamed_src and peer_src are read on the controller by the shard_fetch action; call the "
                             "module by its name dlinfra.gpu_cluster.shard_fetch, or pass shards_file / streamed_file / peer_file on the node")
    try:
        if params["shards_file"] is not None:
            # Read once; a re-run given the same bytes as the last complete one confirms dest without parsing them.
            shards = ShardListFile(params["shards_file"])
        else:
            # Suboptions fill absent keys with None; the engine wants only what was given.
            shards = [dict((key, value) for key, value in shard.items() if value is not None) for shard in params["shards"]]
        streamed = load_shards_file(params["streamed_file"]) if params["streamed_file"] is not None else []
        normalize_shards(streamed)  # the same checks of names and URLs; the hand-off lists take the mappings
        peer = None
        if params["peer_file"] is not None:
            peer = load_peer_file(params["peer_file"])
            peer.update(token=params["peer_token"], wait=params["peer_wait"], linger=params["peer_linger"])
            if params["peer_hosts"] is not None:
                peer = without_lost_peers(peer, params["peer_hosts"])
        result = stage(
            shards, params["dest"], concurrency=params["concurrency"], retries=params["retries"], timeout=params["timeout"],
            bandwidth_limit=params["bandwidth_limit"], verify=params["verify"], prune=params["prune"], journal=params["journal"],
            check_mode=module.check_mode, report_limit=params["report_limit"], peer=peer,
            progress_interval=params["progress_interval"], progress_id=params["progress_id"], if_locked=params["if_locked"],
            source_access=dict((key, params[key]) for key in ("headers", "url_username", "url_password", "proxy", "ca_file")),
        )
    except StagingError as exc:
        module.fail_json(msg="%s" % exc, changed=False)
    for warning in result.pop("warnings"):
        module.warn(warning)
    earlier = result.get("earlier_run")
    if earlier:
        module.warn("an earlier run's fetch (pid %s) was still staging into %s: %s it (%.0f s), then went on from where it left "
                    "dest" % (earlier["pid"] or "unknown", params["dest"], "stopped" if earlier["stopped"] else "waited for",
                              earlier["waited"]))
    for bad in result.get("peers", {}).get("bad_data", []):
        module.warn("peer %s sent %s with bad data (%s); it was rejected and taken from the source" % (bad["peer"], bad["name"], bad["reason"]))
    for peer, reason in sorted(result.get("peers", {}).get("given_up", {}).items()):
        module.warn("peer %s was given up on (%s); the shards it was to send came from the source" % (peer, reason))
    for peer, count in sorted(result.get("peers", {}).get("waited_out", {}).items()):
        module.warn("%d shard(s) waited peer_wait (%g s) for peer %s without getting it and came from the source; raise "
                    "shard_staging_peer_wait if that peer is only slow" % (count, params["peer_wait"], peer))
    # A "dest" key would make exit_json add the directory's owner and mode to the result.
    result.pop("dest")
    if result["failed_shards"] or result["errors"]:
        module.fail_json(msg=_failure_message(result, params["dest"]), **result)
    if params["handoff_ranks"] is not None:
        try:
            listed = shards.load() if isinstance(shards, ShardListFile) else shards
            result["handoff_changed"] = write_handoff(params["dest"], listed, params["handoff_ranks"], module.check_mode,
                                                      streamed=streamed, world=params["handoff_world"])
        except (StagingError, OSError) as exc:
            module.fail_json(msg="shards are staged in %s but the hand-off lists could not be written: %s" % (params["dest"], exc), **result)
        result["changed"] = result["changed"] or bool(result["handoff_changed"])
    module.exit_json(**result)


def _read_access_file(module, params):
    """The secrets of access_file into params (and into the values the module's output masks); the file is removed
    first, whatever it holds."""
    path = params["access_file"]
    try:
        with open(path) as handle:
            os.unlink(path)
            secrets = json.load(handle)
    except (OSError, ValueError) as exc:
        module.fail_json(msg="access_file %s could not be read: %s" % (path, exc))
    if not isinstance(secrets, dict) or set(secrets) - set(ACCESS_OPTIONS):
        module.fail_json(msg="access_file %s must be a JSON object with only %s" % (path, ", ".join(ACCESS_OPTIONS)))
    given = sorted(key for key in secrets if params[key] is not None)
    if given:
        module.fail_json(msg="give access_file or %s, not both" % ", ".join(given))
    for key, value in secrets.items():
        params[key] = value
        if key != "url_username":
            module.no_log_values.update(_texts(value))


def _texts(value):
    """Every text in value (a header mapping's values, or one string): what the module's output must not show."""
    if isinstance(value, dict):
        return set(str(item) for item in value.values() if item)
    return set([str(value)]) if value else set()


if __name__ == "__main__":
    main()
