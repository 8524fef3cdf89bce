"""The `workspace` stage of make test: where people work, on the lab the stages before left converged (sim-gpu1).

  1. the workspace of tests/fixtures/workspace_hosts.yml (an inventory source: sim-gpu1's variables) set up by site.yml
     on the cluster (--limit cluster_sim: its head plans for all its GPU nodes), for a user the lab creates, changing
     sim-gpu1 only: Jupyter Lab from the anaconda prefix, its pinned wheels through an index on the store
     (tests/harness/lab/jupyter_index.py, as a site without PyPI would serve them), and a TigerVNC desktop; a second run
     changes nothing;
  2. from another lab host (sim-head, standing for the user's machine), through the SSH tunnel the README gives
     (`ssh -L 8888:localhost:8888 -L 5901:localhost:5901 alice@NODE`, to the node's sshd with alice's key): Jupyter's
     API refuses a request without the token and answers with it, listing the kernel of the lab's conda environment
     `train`; the desktop takes the password, refuses a wrong one, and its frame is a desktop, not a black one
     (tests/harness/lab/rfb_snapshot.py);
  3. the run command (rootless podman, prepared by tests/harness/lab/workspace_node.sh) as the user: the command runs in
     the image, as the user, in their working directory, with the GPU's device node (a test double) and the staged
     datasets read-only (a write fails);
  4. from a host that is not a member of the cluster (the store), a scan of every TCP port of each node finds only SSH
     and the monitoring endpoints, which answer 401 without a password: neither workspace service, though both listen
     on sim-gpu1's loopback. sim-gpu1 runs the host firewall (host_firewall_enabled in the same inventory): from the
     store only SSH answers there, and sshd greets it; from sim-head, a member, every port it listens on answers.
"""
import json
import pathlib
import subprocess
import time

import yaml

from lab import ROOT, USER_INVENTORY, Stage

STAGE = Stage("workspace-lab")
step, fail, sh = STAGE.step, STAGE.fail, STAGE.sh
WORK = ROOT / ".cache" / "workspace"
NODE, SCANNER, STORE = "sim-gpu1", "sim-head", "sim-store"
CLUSTER = ("sim-head", "sim-gpu1", "sim-gpu2")
# What may answer from outside the cluster: sshd (which this stage gives sim-gpu1), node exporter and Prometheus.
AUTHENTICATED = {22: "SSH", 9100: "node exporter, HTTPS and a password", 9090: "Prometheus, HTTPS and a password"}
HTTPS_PORTS = (9100, 9090)
CLIENT = SCANNER  # the user's machine: the tunnel's near end
TUNNEL_KEY = "/root/.ssh/workspace_lab"
LOCAL_OFFSET = 10000  # the tunnel's ports on CLIENT: 18888 for 8888, 15901 for 5901 (a head may run its own Jupyter)
GPU_NODES = ("sim-gpu1", "sim-gpu2")  # site.yml runs on the whole cluster (its head plans for all its GPU nodes)
WORKSPACE_HOSTS = ROOT / "tests" / "fixtures" / "workspace_hosts.yml"
SETTINGS = yaml.safe_load(WORKSPACE_HOSTS.read_text())["all"]["hosts"][NODE]
USER = SETTINGS["workspace_user"]
JUPYTER_PORT = SETTINGS["anaconda_jupyter_users"][0]["port"]
TOKEN = SETTINGS["anaconda_jupyter_users"][0]["token"]
DISPLAY = SETTINGS["remote_desktop_users"][0]["display"]
VNC_PASSWORD = SETTINGS["remote_desktop_users"][0]["password"]
DATASETS = "/srv/ssd"  # shard_staging_root of the lab's rack (inventories/sim), which the run command mounts read-only


def copy_to(host, source, dest):
    """docker cp source (a file or a directory's contents) to dest on a lab host, outside its tmpfs mounts."""
    subprocess.run(["docker", "exec", host, "mkdir", "-p", dest], check=True)
    subprocess.run(["docker", "cp", str(source) + ("/." if pathlib.Path(source).is_dir() else ""), "%s:%s" % (host, dest)],
                   check=True)


def converge(name):
    """site.yml with the workspace's inventory, on the cluster (as a site turns it on); each GPU node's changed count."""
    log = WORK / (name + ".log")
    began = time.monotonic()
    with open(log, "w") as out:
        code = subprocess.call(
            ["ansible-playbook", "site.yml", "-i", str(USER_INVENTORY), "-i", str(WORKSPACE_HOSTS),
             "--limit", "cluster_sim", "-e", "demo_cache_dir=%s" % (ROOT / ".cache" / "demo"),
             "-e", "environment_fixture_dir=%s" % (ROOT / "tests" / "fixtures" / "environments")],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    text = log.read_text()
    changed = {line.split(" ", 1)[0]: int(part.split("=")[1]) for line in text.splitlines()
               if line.split(" ", 1)[0] in GPU_NODES for part in line.split() if part.startswith("changed=")}
    print("workspace-lab: run %s: exit %d in %.0f s, changed=%s (log %s)"
          % (name, code, time.monotonic() - began, changed, log), flush=True)
    if code != 0:
        print(text[-5000:])
        fail("run %s exited %d" % (name, code))
    return changed


def open_tunnel():
    """sshd on the node (a real node runs one; the lab's images have it switched off), alice's key, and the tunnel from
    CLIENT with the README's forwards, in the background: Jupyter and the desktop are then on CLIENT's loopback."""
    install = "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends %s >/dev/null"
    sh(NODE, "systemctl is-active --quiet ssh || ((command -v sshd >/dev/null || %s) && systemctl enable --now ssh "
             ">/dev/null 2>&1)" % (install % "openssh-server"))
    sh(CLIENT, "command -v ssh >/dev/null || %s" % (install % "openssh-client"))
    sh(CLIENT, "mkdir -p -m 700 /root/.ssh && test -f %s || ssh-keygen -q -t ed25519 -N '' -f %s" % (TUNNEL_KEY, TUNNEL_KEY))
    key = sh(CLIENT, "cat %s.pub" % TUNNEL_KEY).strip()
    sh(NODE, "install -d -m 700 -o {u} -g {u} /home/{u}/.ssh && echo '{k}' > /home/{u}/.ssh/authorized_keys "
             "&& chown {u}: /home/{u}/.ssh/authorized_keys && chmod 600 /home/{u}/.ssh/authorized_keys"
             .format(u=USER, k=key))
    close_tunnel()
    sh(CLIENT, "ssh -f -N -o ExitOnForwardFailure=yes -o StrictHostKeyChecking=accept-new -o BatchMode=yes -i %s "
               "-L %d:localhost:%d -L %d:localhost:%d %s@%s >/dev/null 2>/root/tunnel.log"
               % (TUNNEL_KEY, LOCAL_OFFSET + JUPYTER_PORT, JUPYTER_PORT, LOCAL_OFFSET + 5900 + DISPLAY, 5900 + DISPLAY,
                  USER, NODE))


def close_tunnel():
    sh(CLIENT, "pkill -x ssh || true")  # the tunnel is CLIENT's only ssh client


def http_status(path, token=None):
    header = "-H 'Authorization: token %s'" % token if token else ""
    return sh(CLIENT, "curl -s -o /dev/null -w '%%{http_code}' %s http://127.0.0.1:%d%s"
              % (header, LOCAL_OFFSET + JUPYTER_PORT, path))


def snapshot(password):
    """rfb_snapshot.py on CLIENT against the user's display through the tunnel: (exit status, its JSON)."""
    sh(CLIENT, "printf %%s '%s' > /root/vnc-try && chmod 600 /root/vnc-try" % password)
    done = subprocess.run(["docker", "exec", CLIENT, "python3", "/root/rfb_snapshot.py",
                           "--port", str(LOCAL_OFFSET + 5900 + DISPLAY),
                           "--password-file", "/root/vnc-try", "--timeout", "30"],
                          capture_output=True, text=True, check=False)
    try:
        return done.returncode, json.loads(done.stdout)
    except ValueError:
        return done.returncode, {"output": done.stdout + done.stderr}


def tcp_listeners():
    """(local address, port) of each TCP socket sim-gpu1 listens on (ss -Hltn)."""
    return [(address, int(port)) for address, port in
            (line.split()[3].rsplit(":", 1) for line in sh(NODE, "ss -Hltn").splitlines())]


def listening(port):
    """The local addresses sim-gpu1 listens on for port."""
    return sorted({address for address, bound in tcp_listeners() if bound == port})


def beyond_loopback():
    """The TCP ports sim-gpu1 listens on beyond its loopback."""
    return sorted({port for address, port in tcp_listeners() if not address.startswith("127.") and address != "[::1]"})


def firewall_check():
    """sim-gpu1's firewall: its table loaded; of the ports it listens on, only SSH answers the store, and sshd greets it;
    each answers sim-head, a member of the cluster, and node exporter still asks sim-head for a password."""
    sh(NODE, "nft list table inet dlinfra_host_firewall >/dev/null")
    ports = ",".join(str(port) for port in beyond_loopback())
    if "22" not in ports.split(",") or "9100" not in ports.split(","):
        fail("%s should listen on 22 (sshd) and 9100 (node exporter) beyond its loopback: %s" % (NODE, ports))
    outside = sh(STORE, "python3 /root/port_scan.py %s %s" % (NODE, ports)).split()
    if outside != ["22"]:
        fail("with the firewall on, %s's ports %s answer %s (expected SSH only): the firewall lets them through"
             % (NODE, outside, STORE))
    greeting = sh(STORE, "python3 -c 'import socket; print(socket.create_connection((\"%s\", 22), timeout=10)"
                         ".recv(64).decode().strip())'" % NODE).strip()
    if not greeting.startswith("SSH-2.0-"):
        fail("%s's sshd did not greet %s through the firewall: %r" % (NODE, STORE, greeting))
    inside = sh(SCANNER, "python3 /root/port_scan.py %s %s" % (NODE, ports)).split()
    if inside != ports.split(","):
        fail("with the firewall on, %s answers %s on %s only, of %s: the cluster's own hosts must reach every port"
             % (NODE, SCANNER, inside, ports))
    status = unauthenticated_status(NODE, 9100, asker=SCANNER)
    if status != 401:
        fail("%s's node exporter answers %s without a password: %s" % (NODE, SCANNER, status))
    print("workspace-lab: %s's firewall: of its ports %s, %s answer(s) %s (sshd greets it: %s), all answer %s (node "
          "exporter 401 without a password)" % (NODE, ports, outside, STORE, greeting, SCANNER))


def run_check():
    """`run` on sim-gpu1, as the user, in a directory of their home: the command runs in the image (which has no
    /etc/os-release, the node has), as the user (uid and gid), where they are, sees the GPU's device node through the
    CDI spec (test doubles: the lab has no GPU), reads a staged dataset and cannot write to it; a file it makes in the
    working directory is the user's on the node."""
    probe = ("echo ids=$(id -u):$(id -g); echo pwd=$(pwd); echo os=$(head -n 1 /etc/os-release 2>/dev/null); "
             "echo device=$(ls /dev/nvidia0); echo dataset=$(ls %s | head -n 1); "
             "echo write=$(touch %s/written-by-run 2>&1 && echo written); touch made-by-run" % (DATASETS, DATASETS))
    done = subprocess.run(["docker", "exec", NODE, "su", "-", USER, "-c",
                           "mkdir -p work && cd work && rm -f made-by-run && run sh -c '%s'" % probe],
                          capture_output=True, text=True, check=False)
    seen = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    if done.returncode != 0 or len(seen) < 6:
        fail("run as %s: exit %d: %s %s" % (USER, done.returncode, done.stdout, done.stderr[-2000:]))
    ids = ":".join(sh(NODE, "id -u %s; id -g %s" % (USER, USER)).split())
    home = sh(NODE, "getent passwd %s | cut -d: -f6" % USER).strip()
    owner = sh(NODE, "stat -c %%U %s/work/made-by-run 2>&1" % home, check=False).strip()
    problems = [what for what, bad in (
        ("runs as %s, not the user's %s" % (seen["ids"], ids), seen["ids"] != ids),
        ("runs in %s, not %s/work" % (seen["pwd"], home), seen["pwd"] != home + "/work"),
        ("runs on the node, not in the image (it has %s)" % seen["os"], seen["os"] != ""),
        ("has no /dev/nvidia0 (%s)" % seen["device"], seen["device"] != "/dev/nvidia0"),
        ("lists nothing in %s" % DATASETS, not seen["dataset"]),
        ("wrote into %s (%s)" % (DATASETS, seen["write"]), "Read-only file system" not in seen["write"]),
        ("left made-by-run owned by %s, not %s" % (owner, USER), owner != USER)) if bad]
    if problems:
        fail("the run command %s; its output: %s" % ("; ".join(problems), seen))
    facts = (USER, seen["ids"], seen["pwd"], seen["device"], DATASETS, seen["dataset"], seen["write"], USER)
    print("workspace-lab: run as %s: %s in %s, in the image, %s present, %s listed (%s), a write there refused (%s), "
          "its file in the working directory %s's" % facts)


def unauthenticated_status(host, port, asker=STORE):
    """The HTTP status a request without credentials gets from https://host:port/ (asked from the store)."""
    ask = ("import ssl, urllib.error, urllib.request\n"
           "try:\n"
           "    print(urllib.request.urlopen(\"https://%s:%d/\", context=ssl._create_unverified_context(), timeout=10).status)\n"
           "except urllib.error.HTTPError as error:\n"
           "    print(error.code)\n" % (host, port))
    answer = sh(asker, "python3 -c '%s'" % ask, check=False).strip()
    return int(answer) if answer.isdigit() else answer


def main():
    if not (USER_INVENTORY / "hosts.yml").exists():
        fail("%s is missing: this stage runs on the lab the as-a-user stage converged" % USER_INVENTORY)
    WORK.mkdir(parents=True, exist_ok=True)

    step("1. Jupyter and a desktop for %s on %s, the wheels from the store's index" % (USER, NODE))
    # What the site's admin does first: the user, the wheels' index on the store, Mesa's libGL, the run command's
    # engine and image (and the GPU's device nodes as a test double).
    subprocess.run([str(ROOT / "tests" / "harness" / "lab" / "workspace_node.sh"), USER, str(WORK / "pypi")], check=True)
    first = converge("first")
    if not first.get(NODE) or any(first.get(node) != 0 for node in GPU_NODES if node != NODE):
        fail("the first run should change %s only (its inventory's workspace), it changed %s (log %s)"
             % (NODE, first, WORK / "first.log"))
    if any(converge("again").values()):
        fail("the second run changed something (log %s)" % (WORK / "again.log"))

    step("2. Jupyter and the desktop through an SSH tunnel from %s, with their secrets only" % CLIENT)
    open_tunnel()
    refused, answered = http_status("/api/kernelspecs"), http_status("/api/kernelspecs", TOKEN)
    specs = json.loads(sh(CLIENT, "curl -s -H 'Authorization: token %s' http://127.0.0.1:%d/api/kernelspecs"
                          % (TOKEN, LOCAL_OFFSET + JUPYTER_PORT)))
    if refused not in ("403", "302") or answered != "200":
        fail("Jupyter's API: %s without the token (expected 403 or a redirect to login), %s with it" % (refused, answered))
    if not any("train" in name for name in specs.get("kernelspecs", {})):
        fail("Jupyter lists no kernel of the environment train: %s" % sorted(specs.get("kernelspecs", {})))
    sh(CLIENT, "command -v python3 >/dev/null && python3 -c 'import Cryptodome' 2>/dev/null "
               "|| apt-get install -y -qq --no-install-recommends python3-pycryptodome >/dev/null")
    copy_to(CLIENT, ROOT / "tests" / "harness" / "lab" / "rfb_snapshot.py", "/root")
    code, frame = snapshot(VNC_PASSWORD)
    if code != 0:
        fail("the desktop with its password: exit %d, %s" % (code, frame))
    wrong, refusal = snapshot("wrong-pw")
    if wrong != 2:
        fail("the desktop took a wrong password: exit %d, %s" % (wrong, refusal))
    close_tunnel()
    print("workspace-lab: through the tunnel, Jupyter %s without the token, 200 with it, kernels %s; the desktop %s; a wrong password refused"
          % (refused, sorted(specs["kernelspecs"]), {k: frame.get(k) for k in ("width", "height", "colours")}))

    step("3. the run command as %s: the image, as the user, in the working directory, the datasets read-only" % USER)
    run_check()

    step("4. a port scan of every node of the cluster from %s, which is not one of them" % STORE)
    for port in (JUPYTER_PORT, 5900 + DISPLAY):
        if listening(port) not in (["127.0.0.1"], ["127.0.0.1", "[::1]"]):
            fail("%s listens on %s for port %d, expected its loopback only" % (NODE, listening(port), port))
    copy_to(STORE, ROOT / "tests" / "harness" / "lab" / "port_scan.py", "/root")
    copy_to(SCANNER, ROOT / "tests" / "harness" / "lab" / "port_scan.py", "/root")
    firewall_check()
    for host in CLUSTER:
        if host == NODE:
            continue  # its firewall drops what the store sends: firewall_check scanned its listening ports
        found = [int(port) for port in sh(STORE, "python3 /root/port_scan.py %s" % host).split()]
        unknown = sorted(set(found) - set(AUTHENTICATED))
        if unknown:
            fail("from %s, %s's port(s) %s answer, none of them a service that authenticates (%s)"
                 % (STORE, host, unknown, AUTHENTICATED))
        refused = {port: unauthenticated_status(host, port) for port in found if port in HTTPS_PORTS}
        if any(status != 401 for status in refused.values()):
            fail("from %s, %s answers without a password: HTTP status by port %s, expected 401" % (STORE, host, refused))
        print("workspace-lab: from %s, %s's open TCP ports are %s, each authenticating (%s); without a password %s"
              % (STORE, host, found, ", ".join(AUTHENTICATED[port] for port in found), refused))

    print("workspace-lab: passed")


if __name__ == "__main__":
    main()
