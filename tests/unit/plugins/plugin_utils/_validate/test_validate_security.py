"""security.listeners from what `ss -Hltnpe` printed on a node: sockets beyond loopback must belong to a service that
authenticates. The lines are those of the simulated lab's nodes (processes unnamed in a container, units from the
cgroup) and of a host where root may trace every listener."""

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._common.sockets import listening
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.security import accepting, listeners_check

CGROUP = "cgroup:/docker/c741de17/system.slice/%s"
NODE_EXPORTER = ("LISTEN 0      4096            *:9100        *:* uid:100 ino:36693336 sk:11f "
                 + CGROUP % "prometheus-node-exporter.service v6only:0 <->")
PROMETHEUS = ('LISTEN 0      4096            *:9090        *:* users:(("prometheus",pid=34,fd=7)) uid:100 ino:36694524 '
              'sk:120 ' + CGROUP % "prometheus.service v6only:0 <->")
DOCKER_DNS = "LISTEN 0      4096   127.0.0.11:45153 0.0.0.0:* ino:36692143 sk:11e cgroup:/ <->"
RESOLVED = ('LISTEN 0      4096   127.0.0.53%lo:53 0.0.0.0:* users:(("systemd-resolve",pid=300,fd=15)) uid:991 ino:1 sk:1 '
            + CGROUP % "systemd-resolved.service <->")
SSHD = ('LISTEN 0      128          0.0.0.0:22         0.0.0.0:*    users:(("sshd",pid=412,fd=3)) ino:1658 sk:1 '
        + CGROUP % "ssh.service <->")
HTTP_SERVER = ('LISTEN 0      5            0.0.0.0:8999       0.0.0.0:*    users:(("python3",pid=901,fd=3)) uid:1000 '
               'ino:3301 sk:3 ' + CGROUP % "run-u42.service <->")
PASSWD = ["root:x:0:0:root:/root:/bin/bash", "prometheus:x:100:107::/var/lib/prometheus:/usr/sbin/nologin",
          "alice:x:1000:1000::/home/alice:/bin/bash"]
ACCEPTED = [{"unit": "ssh.service", "why": "SSH"},
            {"unit": "prometheus-node-exporter.service", "why": "node exporter: HTTPS and a password"},
            {"unit": "prometheus.service", "why": "Prometheus: HTTPS and a password"}]


def raw(lines, accepted=None, ss_error=""):
    return {"security": {"ss": lines, "ss_error": ss_error, "passwd": PASSWD},
            "expected": {"security_accepted": ACCEPTED if accepted is None else accepted}}


def test_authenticated_and_loopback_listeners_pass_naming_each_port_and_why():
    checked = listeners_check(raw([NODE_EXPORTER, PROMETHEUS, DOCKER_DNS, RESOLVED, SSHD]))
    assert checked["status"] == "pass"
    assert checked["message"] == ("3 port(s) beyond loopback, each authenticating: 22 (SSH); 9090 (Prometheus: HTTPS and "
                                  "a password); 9100 (node exporter: HTTPS and a password)")


def test_nothing_beyond_loopback_passes():
    assert listeners_check(raw([DOCKER_DNS, RESOLVED]))["message"] == "nothing listens beyond loopback"


def test_an_unknown_listener_fails_naming_address_process_unit_user_and_the_fix():
    checked = listeners_check(raw([NODE_EXPORTER, HTTP_SERVER]))
    assert checked["status"] == "fail"
    assert checked["message"] == (
        "1 socket(s) answer beyond this host without an authentication validate knows of: 0.0.0.0:8999 (python3 pid "
        "901, run-u42.service; user alice); fix: stop it, bind it to 127.0.0.1, or, where it does authenticate, accept "
        "it in validate_security_accepted_listeners ({unit, process or port, why})")


def test_node_exporter_served_open_fails_where_it_is_not_accepted():
    checked = listeners_check(raw([NODE_EXPORTER], accepted=ACCEPTED[:1]))
    assert checked["status"] == "fail"
    assert "*:9100 (prometheus-node-exporter.service; user prometheus)" in checked["message"]


def test_a_site_accepts_its_own_by_port_and_process():
    site = ACCEPTED + [{"port": 8999, "process": "python3", "why": "the site's upload portal"}]
    assert listeners_check(raw([HTTP_SERVER], accepted=site))["status"] == "pass"


@pytest.mark.parametrize("entry, accepted", [
    ({"port": 8999, "why": "x"}, True),
    ({"port": "8999", "process": "python3", "why": "x"}, True),
    ({"port": 8998, "process": "python3", "why": "x"}, False),
    ({"unit": "run-u*.service", "why": "x"}, True),
    ({"unit": "ssh.service", "why": "x"}, False),
    ({"process": "nginx", "why": "x"}, False),
    ({"why": "names nothing"}, False),
])
def test_an_entry_matches_on_every_field_it_gives(entry, accepted):
    assert (accepting(listening([HTTP_SERVER])[0], [entry]) is not None) == accepted


def test_ss_failing_fails_with_its_error():
    checked = listeners_check(raw([], ss_error="ss: command not found"))
    assert checked["status"] == "fail" and "ss: command not found" in checked["message"]
