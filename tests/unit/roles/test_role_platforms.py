# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role's meta/main.yml claims only platforms site.yml runs on: the ones preflight accepts
(preflight_supported_platforms). Galaxy shows these claims to users choosing a collection."""

import pathlib

import pytest
import yaml

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
SUPPORTED = yaml.safe_load((ROLES / "preflight" / "defaults" / "main.yml").read_text())["preflight_supported_platforms"]
# Galaxy names releases by codename; preflight by major version.
CODENAMES = {"Debian": {"bookworm": "12", "trixie": "13"}, "Ubuntu": {"jammy": "22", "noble": "24"}}


@pytest.mark.parametrize("meta", sorted(ROLES.glob("*/meta/main.yml")), ids=lambda p: p.parts[-3])
def test_a_role_claims_only_platforms_preflight_accepts(meta):
    platforms = yaml.safe_load(meta.read_text())["galaxy_info"]["platforms"]
    claimed = {(p["name"], CODENAMES.get(p["name"], {}).get(str(v), str(v))) for p in platforms for v in p["versions"]}
    accepted = {(name, str(version)) for name, versions in SUPPORTED.items() for version in versions}
    assert claimed and claimed <= accepted, sorted(claimed - accepted)
