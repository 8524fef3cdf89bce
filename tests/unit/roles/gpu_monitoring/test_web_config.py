# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The web configuration the gpu_monitoring role gives node exporter and Prometheus (templates/web.yml.j2) passes
Prometheus' own `promtool check web-config` with real certificates, and names the files and user the role sets."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from role_vars import defaults, load, trust

ROOT = pathlib.Path(__file__).resolve().parents[4]
ROLE = ROOT / "roles" / "gpu_monitoring"
HASH = "$2b$10$abcdefghijklmnopqrstuuYHeTYYHPacAcBI8g32KSbgG75/lqCIG"  # bcrypt of fixture-monitoring-password


def render(web_dir, **overrides):
    variables = dict(defaults(ROLE), **trust(load(ROLE / "vars" / "main.yml")))
    variables.update(inventory_hostname="gpu1", ansible_managed="Ansible managed", __gpu_monitoring_web_dir=str(web_dir),
                     gpu_monitoring_web_password_hash=HASH, **trust(overrides))
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(trust((ROLE / "templates" / "web.yml.j2").read_text()))


def test_the_web_configuration_passes_promtool(tmp_path, promtool):
    subprocess.run([sys.executable, str(ROOT / "tests" / "harness" / "lab" / "fixture_pki.py"), str(tmp_path), "gpu1"],
                   check=True)
    (tmp_path / "gpu1.crt").rename(tmp_path / "node.crt")
    (tmp_path / "gpu1.key").rename(tmp_path / "node.key")
    text = render(tmp_path)
    config = yaml.safe_load(text)
    assert config == {"tls_server_config": {"cert_file": str(tmp_path / "node.crt"), "key_file": str(tmp_path / "node.key")},
                      "basic_auth_users": {"prometheus": HASH}}
    path = tmp_path / "web.yml"
    path.write_text(text)
    checked = subprocess.run([promtool, "check", "web-config", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("username", ["prometheus", "scraper"])
def test_the_user_is_the_one_set(tmp_path, username):
    assert list(yaml.safe_load(render(tmp_path, gpu_monitoring_web_username=username))["basic_auth_users"]) == [username]
