"""ansible-playbook's PLAY RECAP, read in one place for the lab stages (airgap_lab.py, rolling_lab.py) and the fleet
benchmark (benchmarks/fleet/run.py)."""
import re

COUNTS = ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")
HOST_LINE = re.compile(r"^(?P<host>\S+)\s*:\s*(?P<counts>ok=\d+.*)$")
COUNT = re.compile(r"(\w+)=(\d+)")


def recap(output):
    """host -> {count: int} for each of COUNTS, from the last PLAY RECAP in output (a run's stdout, or its log without
    the log's prefixes); {} when output holds no PLAY RECAP. A count the recap leaves out is 0."""
    start = output.rfind("PLAY RECAP")
    if start < 0:
        return {}
    hosts = {}
    for line in output[start:].splitlines()[1:]:
        match = HOST_LINE.match(line)
        if match:
            found = dict(COUNT.findall(match.group("counts")))
            hosts[match.group("host")] = {name: int(found.get(name, 0)) for name in COUNTS}
    return hosts
