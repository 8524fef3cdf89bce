import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._monitoring.checks import (
    listeners, preflight_problems, web_problems)

# A bcrypt hash of "fixture-monitoring-password" (cost 10).
HASH = "$2b$10$abcdefghijklmnopqrstuuYHeTYYHPacAcBI8g32KSbgG75/lqCIG"
WEB = {"web_open": False, "tls_certfile": "/etc/ssl/n1.crt", "tls_keyfile": "/etc/ssl/n1.key", "tls_cafile": "/etc/ssl/ca.crt",
       "web_username": "prometheus", "web_password": "fixture-monitoring-password", "web_password_hash": HASH}
PUBKEY = "-----BEGIN PUBLIC KEY-----\nMFkw...\n-----END PUBLIC KEY-----\n"
TLS_FOUND = {"cert_exists": True, "key_exists": True, "ca_exists": True, "cert_pubkey": PUBKEY, "key_pubkey": PUBKEY,
             "cert_expired": False, "cert_enddate": "notAfter=Dec  3 16:02:49 2036 GMT", "ca_error": ""}

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
    "web_open": True,
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
    ({"fabric_expected_rate_gbps": "NDR"}, ["gpu_monitoring_fabric_expected_rate_gbps='NDR' is not a rate in Gb/s"]),
    ({"fabric_expected_rate_gbps": 0}, ["gpu_monitoring_fabric_expected_rate_gbps=0 is not a rate in Gb/s"]),
    ({"fabric_expected_rate_gbps": -200}, ["gpu_monitoring_fabric_expected_rate_gbps=-200 is not a rate"]),
    ({"fabric_expected_rate_gbps": True}, ["gpu_monitoring_fabric_expected_rate_gbps=True is not a rate"]),
    ({"fabric_expected_rate_gbps": [400]}, ["gpu_monitoring_fabric_expected_rate_gbps=[400] is not a rate"]),
])
def test_each_bad_setting_is_one_problem_naming_host_and_variable(change, words):
    problems = preflight_problems(dict(GOOD, **change), "n1", [])
    assert len(problems) == 1
    assert problems[0].startswith("n1: ")
    assert "; fix: " in problems[0]
    for word in words:
        assert word in problems[0]


@pytest.mark.parametrize("rate", ["", None, 400, "200", 12.5])
def test_an_expected_fabric_rate_is_a_positive_number_or_none(rate):
    assert preflight_problems(dict(GOOD, fabric_expected_rate_gbps=rate), "n1", []) == []


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


def test_web_settings_and_files_that_serve_tls_are_no_problem():
    assert web_problems(WEB, "n1", TLS_FOUND) == []
    assert preflight_problems(dict(GOOD, **WEB), "n1", [SS_NODE_EXPORTER], tls_found=TLS_FOUND) == []
    assert len(preflight_problems(dict(GOOD, **WEB), "n1", [SS_NODE_EXPORTER])) == 3  # nothing found


def test_open_needs_nothing():
    assert web_problems({"web_open": True}, "n1") == []


def test_unset_settings_are_named_in_one_line_with_both_fixes():
    problems = web_problems(dict(WEB, tls_keyfile="", web_password="  ", web_password_hash=""), "n1")
    assert len(problems) == 1
    assert problems[0].startswith("n1: gpu_monitoring_tls_keyfile, gpu_monitoring_web_password, "
                                  "gpu_monitoring_web_password_hash are not set")
    assert "htpasswd -nbBC 10" in problems[0] and "gpu_monitoring_web_open: true" in problems[0]


def test_a_password_that_is_a_hash_and_a_hash_that_is_not():
    problems = web_problems(dict(WEB, web_password=HASH, web_password_hash="fixture-monitoring-password"), "n1", TLS_FOUND)
    assert problems == [
        "n1: gpu_monitoring_web_password is a bcrypt hash; fix: give the password itself there (Prometheus scrapes with "
        "it) and its hash in gpu_monitoring_web_password_hash",
        "n1: gpu_monitoring_web_password_hash is not a bcrypt hash (node exporter and Prometheus take no other); fix: "
        "give the output of htpasswd -nbBC 10 \"\" 'PASSWORD' | tr -d ':\\n'"]
    the_password_twice = web_problems(dict(WEB, web_password_hash=WEB["web_password"]), "n1", TLS_FOUND)
    assert "it looks like the password itself" in the_password_twice[0]


def test_a_username_with_a_colon():
    assert "has a colon" in web_problems(dict(WEB, web_username="a:b"), "n1", TLS_FOUND)[0]


@pytest.mark.parametrize("found, expected", [
    (dict(TLS_FOUND, cert_exists=False, ca_exists=False),
     ["n1: gpu_monitoring_tls_certfile /etc/ssl/n1.crt does not exist on this host; put the certificate there",
      "n1: gpu_monitoring_tls_cafile /etc/ssl/ca.crt does not exist on this host; put the CA's certificate there"]),
    (dict(TLS_FOUND, key_pubkey=PUBKEY.replace("MFkw", "MFkx")),
     ["n1: gpu_monitoring_tls_certfile /etc/ssl/n1.crt does not match gpu_monitoring_tls_keyfile /etc/ssl/n1.key (their "
      "public keys differ); give the key the certificate was issued for"]),
    (dict(TLS_FOUND, cert_expired=True, cert_enddate="notAfter=Dec  5 16:02:49 2026 GMT\n",
          ca_error="error 10 at 0 depth lookup: certificate has expired"),
     ["n1: gpu_monitoring_tls_certfile /etc/ssl/n1.crt has expired (notAfter=Dec  5 16:02:49 2026 GMT); renew it"]),
    (dict(TLS_FOUND, ca_error="CN = n1\nerror 20 at 0 depth lookup: unable to get local issuer certificate\n"),
     ["n1: gpu_monitoring_tls_certfile /etc/ssl/n1.crt is not signed by gpu_monitoring_tls_cafile /etc/ssl/ca.crt "
      "(openssl verify: CN = n1 error 20 at 0 depth lookup: unable to get local issuer certificate); give the CA that "
      "issued it"]),
    (dict(TLS_FOUND, cert_pubkey=""),
     ["n1: openssl could not read the public key of gpu_monitoring_tls_certfile /etc/ssl/n1.crt or "
      "gpu_monitoring_tls_keyfile /etc/ssl/n1.key (PEM expected; is openssl installed?)"]),
])
def test_certificate_problems_name_the_file_the_variable_and_the_fix(found, expected):
    assert web_problems(WEB, "n1", found) == expected
