# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the lines shard_fetch_wait prints while a node stages a dataset (its own progress, the cluster total, the
summary at its end), from the progress documents the engine keeps on the node (module_utils/_staging/progress.py)."""

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.byte_units import human_bytes


def human_duration(seconds):
    """Seconds as the two largest units: '45s', '3m 20s', '2h 10m', '3d 4h'."""
    seconds = int(round(max(0, seconds)))
    if seconds < 60:
        return "%ds" % seconds
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return "%dm %02ds" % (minutes, seconds)
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return "%dh %02dm" % (hours, minutes)
    days, hours = divmod(hours, 24)
    return "%dd %dh" % (days, hours)


def eta_seconds(progress):
    """Seconds until the bytes still to come are in at the current rate; 0 when all are in; None when it cannot be told."""
    left = progress.get("bytes_total", 0) - progress.get("bytes_done", 0)
    if left <= 0:
        return 0 if progress.get("bytes_total") or progress.get("shards_done", 0) >= progress.get("shards_total", 0) else None
    rate = progress.get("rate") or 0
    return left / rate if rate > 0 else None


def _amounts(progress):
    parts = ["{0:,}/{1:,} shards".format(progress.get("shards_done", 0), progress.get("shards_total", 0))]
    if progress.get("bytes_total"):
        parts.append("%s/%s" % (human_bytes(progress.get("bytes_done")), human_bytes(progress["bytes_total"])))
    else:
        parts.append(human_bytes(progress.get("bytes_done")))
    return parts


def named(who, label):
    """'gpu1 yt8m', or 'gpu1' without a label."""
    return "%s %s" % (who, label) if label else who


def progress_line(host, label, progress):
    """'gpu1 yt8m: 1,234/10,000 shards, 1.1 TiB/8.9 TiB, 1.0 GiB/s, ETA 2h 10m' (and ', 3 failed' when some did)."""
    parts = _amounts(progress)
    if progress.get("phase") == "finishing":
        parts.append("transfers done, finishing")
    else:
        eta = eta_seconds(progress)
        parts.append("%s/s" % human_bytes(progress.get("rate")))
        parts.append("ETA %s" % (human_duration(eta) if eta is not None else "unknown"))
    if progress.get("failed"):
        parts.append("{0:,} failed".format(progress["failed"]))
    return "%s: %s" % (named(host, label), ", ".join(parts))


def total_line(label, entries, hosts):
    """The cluster-wide line from every node's latest progress (entries: host -> progress, 'done' when its fetch ended)."""
    running = [progress for progress in entries.values() if not progress.get("done")]
    total = dict(shards_done=0, shards_total=0, bytes_done=0, bytes_total=0)
    for progress in entries.values():
        for key in total:
            total[key] += progress.get(key, 0) or 0
    parts = _amounts(total)
    parts.append("%s/s" % human_bytes(sum(progress.get("rate") or 0 for progress in running)))
    etas = [eta_seconds(progress) for progress in running]
    known = [eta for eta in etas if eta is not None]
    # The cluster is done when its slowest node is.
    parts.append("ETA %s" % (human_duration(max(known)) if known and len(known) == len(etas) else "unknown"))
    failed = sum(progress.get("failed", 0) or 0 for progress in entries.values())
    if failed:
        parts.append("{0:,} failed".format(failed))
    done = len(entries) - len(running)
    heard = "%d of %d nodes" % (len(entries), hosts) if len(entries) < hosts else "%d nodes" % hosts
    return "%s: %s (%s reporting, %d done)" % (named("all", label), ", ".join(parts), heard, done)


def summary_line(host, label, result):
    """'gpu1 yt8m: done in 2h 10m, 1,234 fetched (12 resumed), 8,766 confirmed, 0 removed, 0 failed, 8.9 TiB at 1.0 GiB/s'."""
    if "fetched" not in result:
        return None
    counts = "{0:,} fetched ({1:,} resumed), {2:,} confirmed, {3:,} removed, {4:,} failed".format(
        result.get("fetched", 0), result.get("resumed", 0), result.get("confirmed", 0), result.get("removed", 0),
        len(result.get("failed_shards") or []))
    return "%s: done in %s, %s, %s at %s/s" % (named(host, label), human_duration(result.get("elapsed", 0)), counts,
                                               human_bytes(result.get("fetched_bytes", 0)), human_bytes(result.get("throughput", 0)))


def final_progress(last, result):
    """What the board keeps for a node whose fetch has ended: its result's counts, the byte total it last reported."""
    last = last or {}
    fetched_bytes = result.get("fetched_bytes", last.get("bytes_done", 0)) or 0
    return dict(done=True, rate=0, bytes_done=fetched_bytes, bytes_total=max(last.get("bytes_total", 0) or 0, fetched_bytes),
                shards_done=result.get("fetched", 0) + result.get("confirmed", 0) if "fetched" in result else last.get("shards_done", 0),
                shards_total=result.get("total", last.get("shards_total", 0)), failed=len(result.get("failed_shards") or []))
