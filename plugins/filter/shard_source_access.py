# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""shard_source_access: how the nodes reach one shard_staging dataset's store, as shard_fetch options."""

from ansible.errors import AnsibleFilterError

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.url_credentials import redact_url, split_user_info

KEYS = ("headers", "url_username", "url_password", "proxy", "ca_file")
SECRET_KEYS = ("headers", "url_password", "proxy")


def shard_source_access(dataset):
    if not isinstance(dataset, dict):
        raise AnsibleFilterError("shard_source_access expects one shard_staging_datasets entry (a mapping)")
    access = dict((key, dataset[key]) for key in KEYS if dataset.get(key) not in (None, ""))
    if dataset.get("proxy") == "":
        access["proxy"] = ""
    if "url_username" not in access:
        found = set()
        for pattern in str(dataset.get("source", "")).split("::"):
            _url, user, password = split_user_info(pattern.strip())
            if user is not None:
                found.add((user, password))
        if len(found) > 1:
            raise AnsibleFilterError("dataset %r: its source patterns carry different user info; give url_username and url_password"
                                     % dataset.get("name"))
        if found:
            access["url_username"], password = found.pop()
            if password is not None:
                access["url_password"] = password
    return access


def shard_dataset_shown(dataset):
    """The dataset entry as it may be shown (a loop item, a registered result): no password, headers or proxy, and its
    source and index URLs with user info and query values as ***."""
    if not isinstance(dataset, dict):
        raise AnsibleFilterError("shard_dataset_shown expects one shard_staging_datasets entry (a mapping)")
    shown = dict((key, value) for key, value in dataset.items() if key not in SECRET_KEYS)
    for key in ("source", "index"):
        if isinstance(shown.get(key), str):
            shown[key] = "::".join(redact_url(pattern) for pattern in shown[key].split("::"))
    return shown


class FilterModule(object):
    def filters(self):
        return {"shard_source_access": shard_source_access, "shard_dataset_shown": shard_dataset_shown}
