import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.filter.gpu_monitoring import FilterModule, gpu_monitoring_problems

SETTINGS = {"supported": True, "platform": "Debian 13", "interval": 15, "nvidia_smi_command": "nvidia-smi -q -x",
            "nvidia_smi_timeout": 10, "textfile_directory": "/var/lib/prometheus/node-exporter",
            "node_exporter_port": 9100, "node_exporter_process_names": ["prometheus-node"], "web_open": True}


def test_registered():
    assert FilterModule().filters()["gpu_monitoring_problems"] is gpu_monitoring_problems
    assert sorted(FilterModule().filters()) == ["gpu_monitoring_listen", "gpu_monitoring_problems",
                                                "gpu_monitoring_prometheus_config", "gpu_monitoring_scrape_plan"]


def test_listen_gives_the_flags_or_the_problem():
    listen = FilterModule().filters()["gpu_monitoring_listen"]
    addr = '[{"ifname": "eth0", "addr_info": [{"family": "inet", "local": "10.0.0.11"}]}]'
    route = '[{"dst": "192.0.2.1", "prefsrc": "10.0.0.11"}]'
    assert listen("", "gpu1", 9100, addr, route) == {
        "address": "10.0.0.11", "problem": "",
        "flags": "--web.listen-address=10.0.0.11:9100 --web.listen-address=127.0.0.1:9100"}
    assert listen("10.0.0.99", "gpu1", 9100, addr, route)["flags"] == ""
    assert listen("", "gpu1", 9100, addr, "")["problem"].startswith("gpu1: gpu_monitoring_listen_address is empty")


@pytest.mark.parametrize("ss_lines, ss_error, count", [
    (None, None, 0),
    ([], "", 0),  # the role passes '' when ss succeeded
    (['LISTEN 0 4096 *:9100 *:* users:(("node",pid=7,fd=3)) uid:104 ino:1 sk:1 <->'], "", 1),
    ([], "ss: not found", 1),
])
def test_passes_the_host_sockets_and_error(ss_lines, ss_error, count):
    assert len(gpu_monitoring_problems(SETTINGS, "n1", ss_lines, ss_error)) == count


def test_settings_must_be_a_mapping():
    with pytest.raises(AnsibleFilterError, match="as a mapping"):
        gpu_monitoring_problems(["interval"], "n1")
