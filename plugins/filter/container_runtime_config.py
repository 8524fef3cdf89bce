# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Merge the NVIDIA runtime into container engine configs that others own, keeping every key already there.

Docker's daemon.json is JSON: merged as data. containerd's files are TOML, which has no writer in the standard
library, and the user's comments and layout should survive: the main config is edited as text (one top-level
``imports`` line, or one table), checked by parsing the result; only the drop-in file, which the role owns
whole, is written from data.

containerd 1.x merges an imported file into the main config per plugin: the imported
``plugins."io.containerd.grpc.v1.cri"`` table replaces the main config's whole CRI table (containerd issue
5837). The drop-in for 1.x therefore carries the main config's CRI table with the nvidia runtime added, as
NVIDIA's own ``nvidia-ctk runtime configure --drop-in-config`` does. containerd 2.x merges key by key, so its
drop-in holds the nvidia runtime alone.
"""

import copy
import fnmatch
import json
import re

try:
    import tomllib
except ImportError:  # Python < 3.11; the controller of ansible-core 2.19 has 3.11 or later
    tomllib = None

from ansible.errors import AnsibleFilterError

CRI_V2 = 'io.containerd.grpc.v1.cri'  # config version 2 (containerd 1.x)
CRI_V3 = 'io.containerd.cri.v1.runtime'  # config version 3 (containerd 2.x)
RUNC_V2 = 'io.containerd.runc.v2'
_HEADER = '# Managed by Ansible (dlinfra.gpu_cluster.nvidia_container_toolkit): the nvidia runtime for containerd.\n'
_BARE_KEY = re.compile(r'^[A-Za-z0-9_-]+$')


def _loads(text, what):
    if tomllib is None:
        raise AnsibleFilterError('%s: reading TOML needs Python 3.11 or later on the controller' % what)
    try:
        return tomllib.loads(text or '')
    except tomllib.TOMLDecodeError as exc:
        raise AnsibleFilterError('%s is not valid TOML (%s); fix the file, then run the role again' % (what, exc))


# --- Docker ---------------------------------------------------------------------------------------------------

def docker_daemon_config(current, runtime_path='nvidia-container-runtime', default_runtime=False, runtime_name='nvidia'):
    """daemon.json with the nvidia runtime, every other key as it was.

    ``current`` is the parsed file ({} or None when there is none). ``default-runtime`` is set when
    default_runtime is true; when it is false, a default-runtime that names this runtime is dropped (the role
    set it), any other is the user's and stays.
    """
    if current is None:
        current = {}
    if not isinstance(current, dict):
        raise AnsibleFilterError('daemon.json holds a JSON %s, not an object; fix the file, then run the role again'
                                 % type(current).__name__)
    merged = copy.deepcopy(current)
    runtimes = merged.get('runtimes') or {}
    if not isinstance(runtimes, dict):
        raise AnsibleFilterError('daemon.json: "runtimes" is not an object; fix the file, then run the role again')
    runtime = dict(runtimes.get(runtime_name) or {})
    runtime['path'] = runtime_path
    runtime.setdefault('args', [])
    runtimes[runtime_name] = runtime
    merged['runtimes'] = runtimes
    if default_runtime:
        merged['default-runtime'] = runtime_name
    elif merged.get('default-runtime') == runtime_name:
        del merged['default-runtime']
    return merged


# --- TOML text helpers ----------------------------------------------------------------------------------------

def _key(name):
    return name if _BARE_KEY.match(name) else json.dumps(name, ensure_ascii=False)


def _value(value):
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return '[' + ', '.join(_value(item) for item in value) + ']'
    if isinstance(value, dict):
        return '{' + ', '.join('%s = %s' % (_key(k), _value(v)) for k, v in value.items()) + '}'
    raise AnsibleFilterError('cannot write a %s as a containerd setting' % type(value).__name__)


def _tables(data, path=()):
    """TOML lines for nested dicts: scalars first, then one [table] per dict, depth first."""
    lines = []
    scalars = [(k, v) for k, v in data.items() if not isinstance(v, dict)]
    if path and (scalars or not any(isinstance(v, dict) for v in data.values())):
        lines.append('')
        lines.append('[%s]' % '.'.join(_key(part) for part in path))
    lines.extend('%s%s = %s' % ('  ' * bool(path), _key(k), _value(v)) for k, v in scalars)
    for name, value in data.items():
        if isinstance(value, dict):
            lines.extend(_tables(value, path + (name,)))
    return lines


def toml_dumps(data):
    """A TOML document for what tomllib reads from containerd configs (tables, strings, numbers, bools, arrays)."""
    return '\n'.join(_tables(data)).lstrip('\n') + '\n'


def _header_path(line):
    """The key path of a [table] header line, or None for any other line."""
    stripped = line.strip()
    if not stripped.startswith('[') or stripped.startswith('[['):
        return None
    try:
        parsed = tomllib.loads(stripped)
    except tomllib.TOMLDecodeError:
        return None
    path = []
    while isinstance(parsed, dict) and len(parsed) == 1:
        name, parsed = next(iter(parsed.items()))
        path.append(name)
    return tuple(path)


def _get(data, path):
    for name in path:
        if not isinstance(data, dict) or name not in data:
            return None
        data = data[name]
    return data


# --- containerd -----------------------------------------------------------------------------------------------

def _config_version(parsed, what):
    """The main config's schema version; a file with settings and no version is version 1."""
    version = parsed.get('version')
    if version is None:
        return 1 if parsed else 0
    if version not in (1, 2, 3):
        raise AnsibleFilterError('%s: version = %r is not a containerd config version (1, 2 or 3)' % (what, version))
    return version


def _major(version):
    major = str(version).split('.', maxsplit=1)[0]
    if not major.isdigit():
        raise AnsibleFilterError('containerd version %r does not start with a number' % (version,))
    return int(major)


def _nvidia_runtime(runc, runtime_path):
    runc = runc or {}
    options = dict(runc.get('options') or {})  # the cgroup driver and the rest follow runc's
    options['BinaryName'] = runtime_path
    return {'runtime_type': runc.get('runtime_type', RUNC_V2), 'options': options}


def containerd_nvidia_dropin(main_text, containerd_version, runtime_path='nvidia-container-runtime',
                             default_runtime=False, runtime_name='nvidia', main_path='config.toml'):
    """The drop-in (TOML text) that gives containerd the nvidia runtime when the main config imports it."""
    parsed = _loads(main_text, main_path)
    major = _major(containerd_version)
    version = _config_version(parsed, main_path)
    if major >= 2:
        if version not in (0, 3):
            raise AnsibleFilterError(
                '%s is a version %s config and containerd is %s: migrate it (containerd config migrate) to version 3, '
                'then run the role again' % (main_path, version, containerd_version))
        cri = {'containerd': {'runtimes': {runtime_name: _nvidia_runtime(
            _get(parsed, ('plugins', CRI_V3, 'containerd', 'runtimes', 'runc')), runtime_path)}}}
        if default_runtime:
            cri['containerd']['default_runtime_name'] = runtime_name
        return _HEADER + toml_dumps({'version': 3, 'plugins': {CRI_V3: cri}})
    if version not in (0, 2):
        raise AnsibleFilterError(
            '%s is a version 1 config (no "version = 2" line), whose imports containerd %s reads with the old '
            'plugin names; convert it to version 2 (containerd config migrate, or start from containerd config default), '
            'then run the role again' % (main_path, containerd_version))
    # containerd 1.x replaces the whole CRI table with the imported one: carry the main config's over.
    cri = copy.deepcopy(_get(parsed, ('plugins', CRI_V2)) or {})
    engine = cri.setdefault('containerd', {})
    runtimes = engine.setdefault('runtimes', {})
    runtimes.setdefault('runc', {'runtime_type': RUNC_V2})  # the imported table replaces the default runc too
    runtimes[runtime_name] = _nvidia_runtime(runtimes['runc'], runtime_path)
    if default_runtime:
        engine['default_runtime_name'] = runtime_name
    return (_HEADER + '# containerd %s replaces the whole CRI table with an imported one, so this file carries a copy\n'
            '# of the CRI table of %s: edit the CRI settings there, then run the role again.\n'
            % (containerd_version, main_path) + toml_dumps({'version': 2, 'plugins': {CRI_V2: cri}}))


def containerd_imports(main_text, import_path, containerd_version='1.7', main_path='config.toml'):
    """The main config with import_path in its top-level ``imports``, everything else as it was."""
    parsed = _loads(main_text, main_path)
    imports = parsed.get('imports') or []
    if any(fnmatch.fnmatchcase(import_path, pattern) for pattern in imports):
        return main_text
    wanted = imports + [import_path]
    line = 'imports = %s' % _value(wanted)
    lines = (main_text or '').splitlines()
    top = next((i for i, text in enumerate(lines) if _header_path(text) is not None), len(lines))
    start = next((i for i in range(top) if re.match(r'\s*imports\s*=', lines[i])), None)
    if start is not None:
        # The old assignment may span lines: it ends where the lines up to it parse as TOML.
        end = next(i for i in range(start, top) if _parses('\n'.join(lines[start:i + 1])))
        lines[start:end + 1] = [line]
    elif not parsed:
        major = _major(containerd_version)
        lines = ['version = %d' % (3 if major >= 2 else 2), line] + lines
    else:
        at = next((i + 1 for i in range(top) if re.match(r'\s*version\s*=', lines[i])), 0)
        lines.insert(at, line)
    result = '\n'.join(lines) + '\n'
    if _loads(result, main_path).get('imports') != wanted:
        raise AnsibleFilterError('%s: could not add %s to its imports; add it by hand' % (main_path, import_path))
    return result


def _parses(text):
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return True


def containerd_runtime_in_place(text, runtime_path='nvidia-container-runtime', default_runtime=False,
                                runtime_name='nvidia', path='containerd-template.toml'):
    """A full containerd config (MicroK8s' template) with the nvidia runtime added in place, as text."""
    parsed = _loads(text, path)
    cri_name = CRI_V3 if parsed.get('version') == 3 else CRI_V2
    engine_path = ('plugins', cri_name, 'containerd')
    runtime_path_keys = engine_path + ('runtimes', runtime_name)
    wanted = _nvidia_runtime(_get(parsed, engine_path + ('runtimes', 'runc')), runtime_path)
    current = _get(parsed, runtime_path_keys)
    lines = text.splitlines()
    if current != wanted:
        if current is not None:
            lines = _drop_tables(lines, runtime_path_keys)
        lines += toml_dumps({'plugins': {cri_name: {'containerd': {'runtimes': {runtime_name: wanted}}}}}).splitlines()
    if default_runtime and _get(parsed, engine_path + ('default_runtime_name',)) != runtime_name:
        lines = _set_key(lines, engine_path, 'default_runtime_name', runtime_name)
    result = '\n'.join(lines) + '\n'
    merged = _loads(result, path)
    if _get(merged, runtime_path_keys) != wanted or (
            default_runtime and _get(merged, engine_path + ('default_runtime_name',)) != runtime_name):
        raise AnsibleFilterError('%s: could not add the %s runtime in place; add it by hand' % (path, runtime_name))
    return text if result.rstrip('\n') == text.rstrip('\n') else result


def _drop_tables(lines, path):
    """The lines without the tables at path and below it."""
    kept, dropping = [], False
    for line in lines:
        header = _header_path(line)
        if header is not None:
            dropping = header[:len(path)] == path
        if not dropping:
            kept.append(line)
    return kept


def _set_key(lines, table, key, value):
    """Set key = value in [table], replacing the line that sets it or adding one under the header."""
    header_at, current = None, None
    for i, line in enumerate(lines):
        header = _header_path(line)
        if header is not None:
            current = header
            if header == table:
                header_at = i
            continue
        if current == table and re.match(r'\s*%s\s*=' % re.escape(key), line):
            indent = re.match(r'\s*', line).group(0)
            lines[i] = '%s%s = %s' % (indent, key, _value(value))
            return lines
    if header_at is None:
        return lines + ['', '[%s]' % '.'.join(_key(p) for p in table), '  %s = %s' % (key, _value(value))]
    lines.insert(header_at + 1, '  %s = %s' % (key, _value(value)))
    return lines


class FilterModule:
    def filters(self):
        return {
            'docker_daemon_config': docker_daemon_config,
            'containerd_nvidia_dropin': containerd_nvidia_dropin,
            'containerd_imports': containerd_imports,
            'containerd_runtime_in_place': containerd_runtime_in_place,
        }
