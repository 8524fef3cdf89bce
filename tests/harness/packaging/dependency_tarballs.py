"""Galaxy is unreachable here: make the collection artifacts a Galaxy install would download, from the copies the
`ansible` PyPI package carries, for the named collections and everything they depend on. An installed copy holds its
MANIFEST.json and FILES.json, which with the files make a collection tarball; the PyPI package leaves out some files
FILES.json lists (CI configuration), so FILES.json keeps the entries that are there and MANIFEST.json its new sha256.
Prints one tarball path a line.

  dependency_tarballs.py OUTDIR              galaxy.yml's dependencies
  dependency_tarballs.py OUTDIR NS.NAME...   those
"""
import hashlib
import io
import json
import pathlib
import sys
import tarfile

import ansible_collections
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
SITE = pathlib.Path(list(ansible_collections.__path__)[-1])


def artifact(fqcn, out):
    namespace, name = fqcn.split(".", 1)
    source = SITE / namespace / name
    manifest = source / "MANIFEST.json"
    if not manifest.is_file():
        sys.exit("dependency_tarballs: %s is not in the ansible package (%s)" % (fqcn, source))
    info = json.loads(manifest.read_text())["collection_info"]
    tarball = out / ("%s-%s-%s.tar.gz" % (namespace, name, info["version"]))
    if not tarball.exists():
        files = json.loads((source / "FILES.json").read_text())
        files["files"] = [entry for entry in files["files"] if entry["name"] == "." or (source / entry["name"]).exists()]
        files_json = json.dumps(files, indent=4).encode()
        manifest_data = json.loads(manifest.read_text())
        manifest_data["file_manifest_file"]["chksum_sha256"] = hashlib.sha256(files_json).hexdigest()
        part = tarball.with_suffix(".part")
        with tarfile.open(part, "w:gz") as archive:
            for name, data in (("MANIFEST.json", json.dumps(manifest_data, indent=4).encode()), ("FILES.json", files_json)):
                member = tarfile.TarInfo(name)
                member.size, member.mode = len(data), 0o644
                archive.addfile(member, io.BytesIO(data))
            for entry in files["files"]:
                if entry["name"] != ".":
                    archive.add(source / entry["name"], arcname=entry["name"], recursive=False)
        part.rename(tarball)
    return tarball, list(info.get("dependencies") or {})


def main(argv):
    out = pathlib.Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    wanted = argv[1:] or list(yaml.safe_load((ROOT / "galaxy.yml").read_text()).get("dependencies") or {})
    done = set()
    while wanted:
        fqcn = wanted.pop(0)
        if fqcn in done:
            continue
        done.add(fqcn)
        tarball, dependencies = artifact(fqcn, out)
        print(tarball)
        wanted.extend(dependencies)


if __name__ == "__main__":
    main(sys.argv[1:])
