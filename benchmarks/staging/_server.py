# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark's machine: Debian packages it needs, cache control, and a private nginx on 127.0.0.1."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

NGINX_CANDIDATES = ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
# Debian package -> the command it provides.
PACKAGES = {"nginx": "nginx", "aria2": "aria2c", "rclone": "rclone", "curl": "curl", "rsync": "rsync"}
START_TIMEOUT_S = 10.0
INSTALL_TIMEOUT_S = 300


class ServerUnavailable(Exception):
    """nginx is missing and cannot be installed, or does not start: the benchmark cannot run at all."""


def find_command(command):
    """The path of a command, looking in the sbin directories too (they are not on a normal user's PATH)."""
    found = shutil.which(command)
    if found is None and command == "nginx":
        found = next((path for path in NGINX_CANDIDATES if os.access(path, os.X_OK)), None)
    return found


def ensure_packages(packages, log):
    """Install the missing ones of `packages` (Debian names) with apt-get when root; return {package: problem} left over."""
    missing = [package for package in packages if find_command(PACKAGES[package]) is None]
    if not missing:
        return {}
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return {package: "not installed (and installing needs root and apt-get)" for package in missing}
    log("installing %s with apt-get" % " ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    command = ["apt-get", "install", "-y", "--no-install-recommends"] + missing
    for attempt in range(2):
        if attempt:
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=INSTALL_TIMEOUT_S, check=False)
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
        if done.returncode == 0:
            break
    still_missing = [package for package in missing if find_command(PACKAGES[package]) is None]
    return {package: "apt-get install failed: %s" % done.stderr.strip()[-300:] for package in still_missing}


def sync_and_drop_caches(drop):
    """Flush dirty pages; with `drop`, also empty the page cache. Returns whether the drop worked (None: not tried)."""
    os.sync()
    if not drop:
        return None
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return True
    except OSError:
        return False


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


NGINX_CONF = """\
{user}worker_processes 2;
worker_rlimit_nofile 65536;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
daemon off;
events {{
    worker_connections 1024;
}}
http {{
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        autoindex on;
    }}
}}
"""


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent):
    """In the child between fork and exec: ask Linux for SIGTERM when the benchmark dies, however it dies (a SIGKILL,
    a test's timeout), so that no nginx outlives it; exit at once if it is already gone."""

    def prepare():
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return prepare


class Nginx(object):
    """nginx serving `root` on a free 127.0.0.1 port, with its config, pid and logs in `prefix`; not the system service."""

    def __init__(self, root, prefix):
        self.root = os.path.abspath(root)
        self.prefix = os.path.abspath(prefix)
        self.process = None
        self.port = None

    @property
    def base_url(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        binary = find_command("nginx")
        if binary is None:
            raise ServerUnavailable("nginx is not installed")
        os.makedirs(self.prefix, exist_ok=True)
        problem = None
        for _attempt in range(3):  # another process may take the free port between the probe and nginx's bind
            self.port = _free_port()
            conf = os.path.join(self.prefix, "nginx.conf")
            with open(conf, "w") as handle:
                handle.write(NGINX_CONF.format(user="user root;\n" if os.geteuid() == 0 else "", prefix=self.prefix, port=self.port, root=self.root))
            self.process = subprocess.Popen([binary, "-p", self.prefix, "-e", os.path.join(self.prefix, "error.log"), "-c", conf],
                                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                            preexec_fn=_die_with_parent(os.getpid()))
            problem = self._wait_until_serving()
            if problem is None:
                return self
            self.stop()
        raise ServerUnavailable("nginx did not start: %s" % problem)

    def _wait_until_serving(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return self.process.stderr.read().decode("utf-8", "replace").strip()[-500:] or "exited with %d" % self.process.returncode
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return None
            except OSError:
                time.sleep(0.05)
        return "nothing listening on 127.0.0.1:%d after %.0f s" % (self.port, START_TIMEOUT_S)

    def logged_errors(self):
        """The error-level lines nginx has logged so far (a failed open, a worker crash)."""
        try:
            with open(os.path.join(self.prefix, "error.log"), errors="replace") as handle:
                return [line.strip() for line in handle if any(level in line for level in ("[error]", "[crit]", "[alert]", "[emerg]"))]
        except FileNotFoundError:
            return []

    def stop(self):
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process.stderr.close()
        self.process = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()
