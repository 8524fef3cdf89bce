# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST DOUBLE of the `snap` command, for the microk8s molecule scenario only.

snapd does not run in the test containers and the snap store is unreachable, so prepare installs this file as
/usr/local/bin/snap. It honours the part of snap's CLI contract the microk8s role and community.general.snap use,
with snap's own output formats:

  snap version | snap list [NAME...] | snap info NAME | snap debug connectivity
  snap install [--classic] [--channel CH | --channel=CH] NAME     (from the "store" below)
  snap ack FILE.assert ; snap install [--classic] [--dangerous] ./NAME_REV.snap   (offline)
  snap refresh --hold[=DURATION] NAME | snap refresh --unhold NAME | snap refresh [--channel CH] NAME
  snap download [--channel CH] [--target-directory DIR] NAME   (what an offline bundle collects: NAME_REV.snap and
                                                                NAME_REV.assert, the same bytes for the same revision)

Installing microk8s copies the microk8s test double (microk8s.py, placed next to this file under
../lib/test-double/: /usr/local/lib/test-double/ by the microk8s scenario's prepare, /usr/lib/test-double/ by the
fixture package snapd-test-double of the simulated lab, tests/test_doubles/snapd/) to /snap/microk8s/<rev>/
and links /snap/bin/microk8s, as snapd would; like the snap's install hook it creates the `microk8s` group and,
when the payload directory holds one, the default args/containerd-template.toml. State lives in
/var/lib/snapd/test-double-state.json.

What needs the store (install NAME, refresh, download, debug connectivity) first asks it over the network, as snapd
does: https://api.snapcraft.io/ unless snapd.service's environment names another store the way snapd's own tests do
(a drop-in under /etc/systemd/system/snapd.service.d/ with Environment=SNAPPY_FORCE_API_URL=URL). The lab's fixtures
point it at a stand-in on a lab host; any HTTP answer there counts as the store answering (the snaps themselves are
the STORE table below). A node with no route out gets snapd's errors, and installs from files only.
"""

import base64
import datetime
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

STATE = "/var/lib/snapd/test-double-state.json"
# The microk8s double and the snap's default files: <prefix>/lib/test-double/ for this file at <prefix>/bin/snap.
PAYLOAD_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "lib", "test-double")
PAYLOAD = os.path.join(PAYLOAD_DIR, "microk8s")
# The store's microk8s tracks this double serves: channel -> (version, revision).
STORE = {
    "microk8s": {
        "1.31/stable": ("v1.31.9", 7979),
        "1.32/stable": ("v1.32.3", 8148),
        "1.33/stable": ("v1.33.4", 8373),
        "latest/stable": ("v1.33.4", 8373),
    },
}
CLASSIC = {"microk8s"}
STORE_API = "https://api.snapcraft.io/"
SNAPD_DROP_INS = "/etc/systemd/system/snapd.service.d/*.conf"
STORE_TIMEOUT = 10


def load():
    try:
        with open(STATE) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {"snaps": {}, "acks": []}


def save(state):
    os.makedirs(os.path.dirname(STATE), exist_ok=True)
    with open(STATE + ".tmp", "w") as handle:
        json.dump(state, handle, indent=1, sort_keys=True)
    os.replace(STATE + ".tmp", STATE)


def fail(message, code=1):
    sys.stderr.write("error: %s\n" % message)
    sys.exit(code)


def option(args, name):
    """Pop `--name VALUE` or `--name=VALUE` from args; None when absent."""
    for index, arg in enumerate(args):
        if arg == name:
            value = args[index + 1]
            del args[index:index + 2]
            return value
        if arg.startswith(name + "="):
            del args[index]
            return arg.split("=", 1)[1]
    return None


def flag(args, name):
    if name in args:
        args.remove(name)
        return True
    return False


def place_payload(name, version, revision):
    """What snapd does on install: the snap's files under /snap/NAME/REV, `current`, and the /snap/bin command."""
    root = "/snap/%s/%s" % (name, revision)
    os.makedirs(root + "/meta", exist_ok=True)
    os.makedirs(root + "/bin", exist_ok=True)  # the real snap's own binaries (containerd, ctr) live here; none in the double
    with open(root + "/meta/snap.yaml", "w") as handle:
        handle.write("name: %s\nversion: %s\nconfinement: classic\n" % (name, version))
    shutil.copy(PAYLOAD, root + "/microk8s")
    os.chmod(root + "/microk8s", 0o755)
    current = "/snap/%s/current" % name
    if os.path.islink(current):
        os.unlink(current)
    os.symlink(str(revision), current)
    os.makedirs("/snap/bin", exist_ok=True)
    if not os.path.lexists("/snap/bin/microk8s"):
        os.symlink(current + "/microk8s", "/snap/bin/microk8s")
    os.makedirs("/var/snap/%s/current" % name, exist_ok=True)
    # The install hook puts the snap's default arguments in $SNAP_DATA/args once; later installs keep the admin's.
    template = os.path.join(PAYLOAD_DIR, "containerd-template.toml")
    target = "/var/snap/%s/current/args/containerd-template.toml" % name
    if os.path.exists(template) and not os.path.exists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(template, target)
    # The microk8s snap's install hook creates the group that may run it without sudo.
    subprocess.run(["groupadd", "--force", "--system", name], check=True)


def store_url():
    """The store snapd asks: SNAPPY_FORCE_API_URL from snapd.service's drop-ins (the last one set wins), or the snap store."""
    url = STORE_API
    for path in sorted(glob.glob(SNAPD_DROP_INS)):
        with open(path) as handle:
            for line in handle:
                match = re.match(r'^\s*Environment=\s*"?SNAPPY_FORCE_API_URL=([^"\s]+)', line)
                if match:
                    url = match.group(1)
    return url


def store_problem():
    """None when the store answers (any HTTP status); otherwise why the connection failed. snapd uses its own proxy
    settings (snap set system proxy.*), not the caller's environment: no proxy here."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        opener.open(store_url(), timeout=STORE_TIMEOUT).close()
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as exc:
        return "dial tcp: %s" % (exc.reason,)
    except OSError as exc:
        return "dial tcp: %s" % (exc,)
    return None


def require_store(action, name):
    """Fail as snap does when the store does not answer: `cannot ACTION "NAME": ...`."""
    problem = store_problem()
    if problem:
        fail('cannot %s "%s": Post "%sv2/snaps/refresh": %s' % (action, name, store_url(), problem))


def cmd_debug(args):
    if args != ["connectivity"]:
        fail("this test double knows 'snap debug connectivity' only", 64)
    problem = store_problem()
    print("Connectivity status:")
    print(" * %s: %s" % (urllib.parse.urlsplit(store_url()).hostname, "unreachable" if problem else "reachable"))
    if problem:
        fail("1 servers unreachable")


def notes(snap):
    listed = [note for note in ("classic", "held") if snap.get(note)]
    return ",".join(listed) or "-"


def cmd_version(args):
    print("snap    2.66.1\nsnapd   2.66.1\nseries  16\ndebian  12\nkernel  %s" % os.uname().release)


def cmd_list(args):
    snaps = load()["snaps"]
    names = args or sorted(snaps)
    missing = [name for name in names if name not in snaps]
    if args and missing:
        fail("no matching snaps installed")
    if not names:
        sys.stderr.write("No snaps are installed yet. Try 'snap install hello-world'.\n")
        return
    rows = [("Name", "Version", "Rev", "Tracking", "Publisher", "Notes")]
    for name in names:
        snap = snaps[name]
        rows.append((name, snap["version"], str(snap["revision"]), snap["channel"] or "-", "canonical\u2713", notes(snap)))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())


def cmd_info(args):
    name = args[0]
    if name not in STORE:
        sys.stderr.write('warning: no snap found for "%s"\n' % name)
        sys.exit(1)
    snap = load()["snaps"].get(name)
    print("name:      %s\nsummary:   Kubernetes for workstations and appliances\npublisher: Canonical\u2713" % name)
    print("license:   Apache-2.0\ndescription: |\n  MicroK8s is a small, fast, secure, certified Kubernetes distribution.")
    if snap:
        print("tracking:     %s\ninstalled:    %s (%s) classic" % (snap["channel"], snap["version"], snap["revision"]))
    print("channels:")
    for channel, (version, revision) in sorted(STORE[name].items()):
        print("  %-15s %s %s (%s) classic" % (channel + ":", version, "2025-01-01", revision))


def assertion_headers(text):
    """Every `key: value` header of every assertion in a .assert file (assertions separated by blank lines)."""
    headers = []
    for block in re.split(r"\n\s*\n", text):
        pairs = dict(re.findall(r"^([a-z0-9-]+): *(.*)$", block, re.MULTILINE))
        if "type" in pairs:
            headers.append(pairs)
    return headers


def cmd_ack(args):
    try:
        with open(args[0]) as handle:
            headers = assertion_headers(handle.read())
    except OSError as exc:
        fail("cannot read assertion file: %s" % exc)
    if not headers:
        fail("cannot assert: assertion file has no assertions")
    state = load()
    for pairs in headers:
        if pairs not in state["acks"]:
            state["acks"].append(pairs)
    save(state)


def install_file(path, classic, dangerous):
    with open(path, "rb") as handle:
        digest = base64.urlsafe_b64encode(hashlib.sha3_384(handle.read()).digest()).decode().rstrip("=")
    state = load()
    revision = next((a for a in state["acks"] if a["type"] == "snap-revision" and a.get("snap-sha3-384") == digest), None)
    if revision is None and not dangerous:
        fail('cannot find signatures with metadata for snap "%s"' % path)
    declaration = next((a for a in state["acks"] if a["type"] == "snap-declaration"
                        and revision and a.get("snap-id") == revision.get("snap-id")), None)
    name = declaration["snap-name"] if declaration else os.path.basename(path).split("_")[0]
    if name in CLASSIC and not classic:
        fail('snap "%s" requires classic confinement; use --classic' % name)
    rev = revision["snap-revision"] if revision else "x1"
    versions = [v for v, r in STORE.get(name, {}).values() if str(r) == str(rev)]
    version = versions[0] if versions else "v0"
    place_payload(name, version, rev)
    state["snaps"][name] = {"version": version, "revision": rev, "channel": "", "classic": classic,
                            "held": state["snaps"].get(name, {}).get("held", False)}
    save(state)
    print("%s %s installed" % (name, version))


def store_release(name, channel):
    """(the channel as snap names it, (version, revision)) the store serves NAME at; fails as snap does."""
    if "/" not in channel:
        channel = "latest/" + channel
    if name not in STORE:
        fail('snap "%s" not found' % name)
    if channel not in STORE[name]:
        fail('requested a non-existing branch on %s for snap "%s"' % (channel, name))
    return channel, STORE[name][channel]


def cmd_install(args):
    classic = flag(args, "--classic")
    dangerous = flag(args, "--dangerous")
    channel = option(args, "--channel") or "latest/stable"
    if len(args) != 1:
        fail("the install command takes one snap here")
    name = args[0]
    if name.endswith(".snap"):
        return install_file(name, classic, dangerous)
    state = load()
    if name in state["snaps"]:
        print('snap "%s" is already installed, see \'snap help refresh\'' % name)
        return
    require_store("install", name)
    channel, (version, revision) = store_release(name, channel)
    if name in CLASSIC and not classic:
        fail('This revision of snap "%s" was published using classic confinement and thus may perform\n'
             "       arbitrary system changes outside of the security sandbox that snaps are\n"
             "       usually confined to, which may put your system at risk.\n\n"
             "       If you understand and want to proceed repeat the command including --classic." % name)
    place_payload(name, version, revision)
    state["snaps"][name] = {"version": version, "revision": revision, "channel": channel, "classic": classic, "held": False}
    save(state)
    print("%s (%s) %s from Canonical\u2713 installed" % (name, channel, version))


def cmd_refresh(args):
    # --hold takes its duration only as --hold=DURATION (an optional value), never from the next argument.
    hold = "forever" if flag(args, "--hold") else next((a.split("=", 1)[1] for a in args if a.startswith("--hold=")), None)
    args[:] = [a for a in args if not a.startswith("--hold=")]
    unhold = flag(args, "--unhold")
    # As snap does: a classic snap's refresh to another channel may say --classic (community.general.snap does).
    flag(args, "--classic")
    channel = option(args, "--channel")
    state = load()
    for name in args:
        if name not in state["snaps"]:
            fail('snap "%s" is not installed' % name)
    if hold is not None:
        for name in args:
            state["snaps"][name]["held"] = True
            if hold in ("forever", ""):
                print('General refreshes of "%s" held indefinitely' % name)
            else:
                until = datetime.datetime.now() + datetime.timedelta(hours=int(hold.rstrip("h")))
                print('General refreshes of "%s" held until %s' % (name, until.isoformat(timespec="seconds")))
    elif unhold:
        for name in args:
            state["snaps"][name]["held"] = False
            print('Removed general refresh hold of "%s"' % name)
    else:
        for name in args:
            require_store("refresh", name)
            snap = state["snaps"][name]
            target = channel or snap["channel"]
            if target not in STORE[name]:
                fail('requested a non-existing branch on %s for snap "%s"' % (target, name))
            version, revision = STORE[name][target]
            if (version, revision) == (snap["version"], snap["revision"]) and target == snap["channel"]:
                print('snap "%s" has no updates available' % name)
                continue
            place_payload(name, version, revision)
            snap.update(version=version, revision=revision, channel=target)
            print("%s (%s) %s from Canonical\u2713 refreshed" % (name, target, version))
    save(state)


def cmd_download(args):
    channel = option(args, "--channel") or "latest/stable"
    target = option(args, "--target-directory") or "."
    if len(args) != 1:
        fail("the download command takes one snap here")
    name = args[0]
    require_store("download", name)
    revision = store_release(name, channel)[1][1]
    stem = os.path.join(target, "%s_%s" % (name, revision))
    payload = ("TEST DOUBLE payload standing in for the %s snap, revision %s (snap download).\n" % (name, revision)).encode()
    digest = base64.urlsafe_b64encode(hashlib.sha3_384(payload).digest()).decode().rstrip("=")
    snap_id = "TestDouble%sSnapId" % name.capitalize()
    signature = "\nTEST DOUBLE SIGNATURE\n"
    assertions = [
        "type: account-key\nauthority-id: canonical\npublic-key-sha3-384: test-double-key\naccount-id: canonical\n"
        "name: test-double\nsign-key-sha3-384: test-double-key\n",
        "type: snap-declaration\nauthority-id: canonical\nseries: 16\nsnap-id: %s\npublisher-id: canonical\nsnap-name: %s\n"
        "timestamp: 2025-01-01T00:00:00Z\nsign-key-sha3-384: test-double-key\n" % (snap_id, name),
        "type: snap-revision\nauthority-id: canonical\nsnap-sha3-384: %s\ndeveloper-id: canonical\nsnap-id: %s\n"
        "snap-revision: %s\nsnap-size: %d\ntimestamp: 2025-01-01T00:00:00Z\nsign-key-sha3-384: test-double-key\n"
        % (digest, snap_id, revision, len(payload)),
    ]
    print('Fetching snap "%s"' % name)
    with open(stem + ".snap", "wb") as handle:
        handle.write(payload)
    print('Fetching assertions for "%s"' % name)
    with open(stem + ".assert", "w") as handle:
        handle.write("\n".join(text + signature for text in assertions))
    print("Install the snap with:\n   snap ack %s.assert\n   snap install %s.snap" % (stem, stem))


COMMANDS = {"version": cmd_version, "list": cmd_list, "info": cmd_info, "ack": cmd_ack, "debug": cmd_debug,
            "install": cmd_install, "refresh": cmd_refresh, "download": cmd_download}


def main(argv):
    if not argv or argv[0] not in COMMANDS:
        fail('unknown command %r; this test double knows %s' % (argv[:1], ", ".join(sorted(COMMANDS))), 64)
    COMMANDS[argv[0]](list(argv[1:]))


if __name__ == "__main__":
    main(sys.argv[1:])
