"""TEST DOUBLE of conda for molecule/anaconda -- not conda.

The fixture installer lays this file into PREFIX/bin/conda and PREFIX/condabin/conda, with a #!/usr/bin/python3
line on top (as a real installer rewrites its scripts' first line). It answers only what the anaconda role calls,
in the real conda's (24.x) output formats:

  conda --version                                  "conda X.Y.Z"
  conda info --json                                conda's info dictionary (root_prefix, conda_version, config_files...)
  conda env list --json                            {"envs": [...]}: the base prefix and PREFIX/envs/* with a conda-meta/
  conda env create --file F --prefix P             refuses an existing environment; writes P/conda-meta/history
  conda env update --file F --prefix P [--prune]   refuses a missing environment; appends to the history
  conda init [SHELL...] [--dry-run]                the "# >>> conda initialize >>>" block in ~/.bashrc or ~/.zshrc,
                                                   reported as conda prints its plan ("modified", "no change",
                                                   "No action taken.")

Its version is the one in the conda package record (conda-meta/conda-<version>-<build>.json), as for the real conda.
It reads no .condarc settings (the test image has no YAML parser): pkgs_dirs and channels are conda's defaults.
Environments get no conda packages: the history records the specs of the file (its "dependencies:" block list).
Each environment is made a Python virtual environment of the host's python3 (P/bin/python, with pip where the host has
ensurepip), so that what the role installs into it with `P/bin/python -m pip` (ipykernel, for Jupyter) really runs.
"""
import datetime
import glob
import json
import os
import platform
import subprocess
import sys

PREFIX = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
HOME = os.path.expanduser("~")


def conda_version():
    records = glob.glob(os.path.join(PREFIX, "conda-meta", "conda-[0-9]*.json"))
    if len(records) != 1:
        sys.exit("fixture conda: expected one conda package record in %s/conda-meta, found %r" % (PREFIX, records))
    return json.loads(read_text(records[0]))["version"]


def read_text(path):
    with open(path) as handle:
        return handle.read()


def known_environments():
    envs = [path for path in glob.glob(os.path.join(PREFIX, "envs", "*")) if os.path.isdir(os.path.join(path, "conda-meta"))]
    return sorted(envs + [PREFIX])


def stdout_json(data):
    print(json.dumps(data, indent=2, sort_keys=True))


def info():
    search_path = [os.path.join(PREFIX, ".condarc"), "/etc/conda/.condarc", "/etc/conda/condarc", os.path.join(HOME, ".condarc")]
    version = conda_version()
    stdout_json({
        "GID": os.getegid(), "UID": os.geteuid(),
        "active_prefix": None, "active_prefix_name": None,
        "av_data_dir": os.path.join(PREFIX, "etc", "conda"), "av_metadata_url_base": None,
        "channels": ["https://conda.anaconda.org/conda-forge/linux-64", "https://conda.anaconda.org/conda-forge/noarch"],
        "conda_build_version": "not installed", "conda_env_version": version,
        "conda_location": os.path.join(PREFIX, "lib", "python3", "site-packages", "conda"),
        "conda_prefix": PREFIX, "conda_shlvl": -1, "conda_version": version,
        "config_files": [path for path in search_path if os.path.isfile(path)],
        "default_prefix": PREFIX,
        "envs": known_environments(),
        "envs_dirs": [os.path.join(PREFIX, "envs"), os.path.join(HOME, ".conda", "envs")],
        "netrc_file": None, "offline": False,
        "pkgs_dirs": [os.path.join(PREFIX, "pkgs"), os.path.join(HOME, ".conda", "pkgs")],
        "platform": "linux-64", "python_version": platform.python_version(), "requests_version": "fixture",
        "rc_path": os.path.join(HOME, ".condarc"), "root_prefix": PREFIX, "root_writable": os.access(PREFIX, os.W_OK),
        "sys.executable": sys.executable, "sys.prefix": PREFIX, "sys.version": sys.version,
        "sys_rc_path": os.path.join(PREFIX, ".condarc"), "user_rc_path": os.path.join(HOME, ".condarc"),
        "user_agent": "conda/%s fixture" % version,
        "virtual_pkgs": [["__linux", platform.release().split("-")[0], "0"], ["__unix", "0", "0"]],
    })


def option(args, *names):
    for name in names:
        if name in args:
            return args[args.index(name) + 1]
    return None


def specs_of(path):
    """The entries of the file's top-level "dependencies:" block list (pip sub-lists are left out)."""
    specs, inside = [], False
    with open(path) as handle:
        for line in handle:
            stripped = line.split("#", 1)[0].rstrip()
            if not stripped:
                continue
            if not line[0].isspace():
                inside = stripped == "dependencies:"
            elif inside and stripped.lstrip().startswith("- ") and len(stripped) - len(stripped.lstrip()) <= 2:
                spec = stripped.lstrip()[2:].strip()
                if not spec.endswith(":"):
                    specs.append(spec)
    return specs


def env(args):
    command, args = args[0], args[1:]
    if command == "list":
        envs = known_environments()
        if "--json" in args:
            stdout_json({"envs": envs})
        else:
            print("# conda environments:\n#")
            for path in envs:
                print("%-20s     %s" % ("base" if path == PREFIX else os.path.basename(path), path))
        return 0
    if command not in ("create", "update"):
        return unsupported(["env", command])
    spec_file = option(args, "-f", "--file") or "environment.yml"
    name = option(args, "-n", "--name")
    target = option(args, "-p", "--prefix") or os.path.join(PREFIX, "envs", name)
    exists = os.path.isdir(os.path.join(target, "conda-meta"))
    if command == "create" and exists:
        print("\nCondaValueError: prefix already exists: %s\n" % target, file=sys.stderr)
        return 1
    if command == "update" and not exists:
        print("\nEnvironmentLocationNotFound: Not a conda environment: %s\n" % target, file=sys.stderr)
        return 1
    specs = specs_of(spec_file)
    if not os.path.exists(os.path.join(target, "bin", "python")):
        python_venv(target)
    os.makedirs(os.path.join(target, "conda-meta"), exist_ok=True)
    with open(os.path.join(target, "conda-meta", "history"), "a") as history:
        history.write("==> %s <==\n" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
        history.write("# cmd: %s %s\n" % (os.path.join(PREFIX, "bin", "conda"), " ".join(["env", command] + args)))
        history.write("# conda version: %s\n" % conda_version())
        history.write("# update specs: %s\n" % json.dumps(specs))
    print("\n#\n# To activate this environment, use\n#\n#     $ conda activate %s\n#" % target)
    return 0


def python_venv(target):
    try:
        import ensurepip  # noqa: F401 pylint: disable=unused-import,import-outside-toplevel
        pip = []
    except ImportError:
        pip = ["--without-pip"]
    subprocess.run(["/usr/bin/python3", "-m", "venv"] + pip + [target], check=True, stdout=subprocess.DEVNULL)


INIT_FILES = {"bash": ".bashrc", "zsh": ".zshrc"}


def init(args):
    dry_run = "--dry-run" in args
    shells = [arg for arg in args if not arg.startswith("-")] or ["bash"]
    if set(shells) - set(INIT_FILES):
        return unsupported(["init"] + shells)
    block = (
        "# >>> conda initialize >>>\n"
        "# !! Contents within this block are managed by 'conda init' !!\n"
        "__conda_setup=\"$('{p}/bin/conda' 'shell.{s}' 'hook' 2> /dev/null)\"\n"
        "if [ $? -eq 0 ]; then\n"
        "    eval \"$__conda_setup\"\n"
        "else\n"
        "    if [ -f \"{p}/etc/profile.d/conda.sh\" ]; then\n"
        "        . \"{p}/etc/profile.d/conda.sh\"\n"
        "    else\n"
        "        export PATH=\"{p}/bin:$PATH\"\n"
        "    fi\n"
        "fi\n"
        "unset __conda_setup\n"
        "# <<< conda initialize <<<\n")
    plan = [("no change", os.path.join(PREFIX, "condabin", "conda")), ("no change", os.path.join(PREFIX, "bin", "conda")),
            ("no change", os.path.join(PREFIX, "etc", "profile.d", "conda.sh"))]
    for shell in shells:
        path = os.path.join(HOME, INIT_FILES[shell])
        old = read_text(path) if os.path.exists(path) else ""
        wanted = block.format(p=PREFIX, s=shell)
        start, end = old.find("# >>> conda initialize >>>\n"), old.find("# <<< conda initialize <<<\n")
        if start >= 0 and end > start:
            new = old[:start] + wanted + old[end + len("# <<< conda initialize <<<\n"):]
        else:
            new = old + ("\n" if old and not old.endswith("\n") else "") + wanted
        if new != old and not dry_run:
            with open(path, "w") as handle:
                handle.write(new)
        plan.append(("modified" if new != old else "no change", path))
    for result, path in plan:
        print("%-14s%s" % (result, path))
    if any(step[0] == "modified" for step in plan):
        print("\n==> For changes to take effect, close and re-open your current shell. <==\n")
    else:
        print("No action taken.")
    return 0


def unsupported(args):
    print("fixture conda (a test double): 'conda %s' is not implemented" % " ".join(args), file=sys.stderr)
    return 2


def main(args):
    if args[:1] in (["--version"], ["-V"]):
        print("conda %s" % conda_version())
        return 0
    if args[:1] == ["info"] and "--json" in args:
        info()
        return 0
    if args[:1] == ["env"] and len(args) > 1:
        return env(args[1:])
    if args[:1] == ["init"]:
        return init(args[1:])
    return unsupported(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
