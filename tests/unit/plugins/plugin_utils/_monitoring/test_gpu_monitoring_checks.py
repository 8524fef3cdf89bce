import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._monitoring.checks import listeners, preflight_problems

GOOD = {
    "supported": True,
    "platform": "Debian 12",
    "interval": 15,
    "nvidia_smi_command": "nvidia-smi -q -x",
    "nvidia_smi_timeout": 10,
    "textfile_directory": "/var/lib/prometheus/node-exporter",
    "node_exporter_port": 9100,
    "node_exporter_process_names": ["prometheus-node"],
    "node_exporter_uid": 104,
}
# `ss -Hltnpe` as Debian 12's iproute2 prints it (it leaves out uid 0).
SS_SSHD = 'LISTEN 0      128          0.0.0.0:22         0.0.0.0:*    users:(("sshd",pid=412,fd=3)) ino:1658 sk:1 <->'
SS_NODE_EXPORTER = ('LISTEN 0      4096               *:9100             *:*    '
                    'users:(("prometheus-node",pid=1733,fd=3)) uid:104 ino:23011 sk:2 v6only:0 <->')
SS_NGINX = ('LISTEN 0      511          0.0.0.0:9100       0.0.0.0:*    '
            'users:(("nginx",pid=901,fd=6),("nginx",pid=900,fd=6)) ino:3301 sk:3 <->')
SS_NGINX_V6 = 'LISTEN 0      511             [::]:9100          [::]:*    users:(("nginx",pid=900,fd=7)) ino:3302 sk:4 <->'
# Root without CAP_SYS_PTRACE (in a container) sees no process column, only the owner's uid.
SS_UNNAMED_NODE_EXPORTER = "LISTEN 0      4096               *:9100             *:* uid:104 ino:23011 sk:2 v6only:0 <->"
SS_NO_PROCESS = "LISTEN 0      4096       127.0.0.1:9100       0.0.0.0:* uid:1000 ino:4410 sk:5 <->"
SS_NO_PROCESS_ROOT = "LISTEN 0      4096       127.0.0.1:9100       0.0.0.0:* ino:4411 sk:6 <->"


def test_good_settings_and_our_own_exporter_are_no_problem():
    assert preflight_problems(GOOD, "n1", [SS_SSHD, SS_NODE_EXPORTER]) == []


@pytest.mark.parametrize("lines, expected", [
    ([SS_SSHD], []),
    ([SS_NODE_EXPORTER], [("*", [("prometheus-node", "1733")], 104)]),
    ([SS_NGINX, SS_NGINX_V6], [("0.0.0.0", [("nginx", "901"), ("nginx", "900")], None),
                               ("[::]", [("nginx", "900")], None)]),
    ([SS_NO_PROCESS, "", "garbage"], [("127.0.0.1", [], 1000)]),
    ([SS_UNNAMED_NODE_EXPORTER], [("*", [], 104)]),
])
def test_listeners_on_the_port(lines, expected):
    assert listeners(lines, 9100) == expected


@pytest.mark.parametrize("change, words", [
    ({"interval": 4, "nvidia_smi_timeout": 3}, ["n1: gpu_monitoring_interval=4 is below 5 s", "set it to 5 or more"]),
    ({"interval": "x"}, ["gpu_monitoring_interval=x is below 5 s"]),
    ({"interval": True}, ["gpu_monitoring_interval=True is below 5 s"]),
    ({"nvidia_smi_timeout": 0}, ["gpu_monitoring_nvidia_smi_timeout=0 is not a positive number of seconds"]),
    ({"nvidia_smi_timeout": 15}, ["gpu_monitoring_nvidia_smi_timeout=15 is not below gpu_monitoring_interval=15"]),
    ({"nvidia_smi_command": "  "}, ["gpu_monitoring_nvidia_smi_command is empty"]),
    ({"textfile_directory": "prom"}, ["gpu_monitoring_textfile_directory='prom' is not an absolute path"]),
    ({"supported": False, "platform": "Rocky 9"}, ["n1: Rocky 9 is not supported by gpu_monitoring yet"]),
])
def test_each_bad_setting_is_one_problem_naming_host_and_variable(change, words):
    problems = preflight_problems(dict(GOOD, **change), "n1", [])
    assert len(problems) == 1
    assert problems[0].startswith("n1: ")
    assert "; fix: " in problems[0]
    for word in words:
        assert word in problems[0]


def test_a_port_clash_names_every_other_program_with_its_pid_and_address():
    problems = preflight_problems(GOOD, "n1", [SS_SSHD, SS_NGINX, SS_NGINX_V6])
    assert problems == [
        "n1: port 9100 (gpu_monitoring_node_exporter_port) is taken: nginx (pid 901), nginx (pid 900) listens on "
        "0.0.0.0:9100; fix: stop it or set gpu_monitoring_node_exporter_port to a free port",
        "n1: port 9100 (gpu_monitoring_node_exporter_port) is taken: nginx (pid 900) listens on [::]:9100; fix: stop "
        "it or set gpu_monitoring_node_exporter_port to a free port",
    ]


@pytest.mark.parametrize("line, owner", [
    (SS_NO_PROCESS, "a process ss cannot name (uid 1000) listens on 127.0.0.1:9100"),
    (SS_NO_PROCESS_ROOT, "a process ss cannot name listens on 127.0.0.1:9100"),
])
def test_a_listener_ss_cannot_name_is_a_clash_unless_it_runs_as_node_exporter(line, owner):
    assert owner in preflight_problems(GOOD, "n1", [line])[0]


@pytest.mark.parametrize("uid, count", [(104, 0), ("104", 0), (None, 1), (105, 1)])
def test_node_exporter_ss_cannot_name_is_recognised_by_its_uid(uid, count):
    assert len(preflight_problems(dict(GOOD, node_exporter_uid=uid), "n1", [SS_UNNAMED_NODE_EXPORTER])) == count


def test_another_port_is_free_when_our_exporter_holds_9100():
    assert preflight_problems(dict(GOOD, node_exporter_port=9200), "n1", [SS_NODE_EXPORTER, SS_NGINX]) == []


def test_ss_failing_is_a_problem_and_every_problem_is_listed_at_once():
    problems = preflight_problems(dict(GOOD, interval=2, nvidia_smi_timeout=3, textfile_directory=""), "n1", [],
                                  "No such file or directory: b'ss'")
    assert len(problems) == 4
    assert "could not list the listening sockets to check port 9100 (No such file or directory: b'ss'); fix: install " \
           "iproute2 (ss)" in problems[3]
