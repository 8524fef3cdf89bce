# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/bundle/files/bundle_wheels.py: the files hash-pinned requirements name, from a PEP 503 index into the bundle's
own index, which pip then installs from with --require-hashes."""

import hashlib
import http.server
import importlib.util
import io
import pathlib
import subprocess
import sys
import threading
import zipfile

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[4] / "roles" / "bundle" / "files" / "bundle_wheels.py"
spec = importlib.util.spec_from_file_location("bundle_wheels", SCRIPT)
bundle_wheels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bundle_wheels)


def wheel(name, version, tag):
    """(file name, bytes) of a minimal wheel pip accepts."""
    dist = "%s-%s" % (name.replace("-", "_"), version)
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        archive.writestr(dist + ".dist-info/METADATA", "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
        archive.writestr(dist + ".dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: %s\n" % tag)
        archive.writestr(dist + ".dist-info/RECORD", "")
    return "%s-%s.whl" % (dist, tag), data.getvalue()


class Index:
    """A PEP 503 index laid out as PyPI's is: project pages under /simple/, files elsewhere, linked absolutely."""

    def __init__(self, files):
        self.files = {"/packages/%s" % name: content for name, content in files}
        self.served = []
        self.tampered = set()
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                index.served.append(self.path)
                body = index.page(self.path) if self.path.startswith("/simple/") else index.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                if self.path in index.tampered:
                    body = body + b"tampered"
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_port

    def page(self, path):
        project = path.split("/")[2]
        links = ['<a href="%s%s#sha256=%s" data-requires-python="&gt;=3.8">%s</a>'
                 % (self.url, key, hashlib.sha256(content).hexdigest(), key.rsplit("/", 1)[1])
                 for key, content in sorted(self.files.items())
                 if bundle_wheels.project(key.rsplit("/", 1)[1].split("-")[0]) == project]
        return ("<html><body>%s</body></html>" % "\n".join(links)).encode() if links else None


@pytest.fixture(name="index")
def fixture_index():
    files = [wheel("demo-pkg", "1.0", "py3-none-any"), wheel("demo-pkg", "1.0", "cp313-cp313-manylinux_2_17_aarch64"),
             wheel("demo-pkg", "0.9", "py3-none-any"), wheel("other", "2.0", "py3-none-any")]
    served = Index(files)
    yield served, {name: hashlib.sha256(content).hexdigest() for name, content in files}
    served.server.shutdown()


def lock(path, *pins):
    lines = ["# a lock file", ""]
    for requirement, hashes in pins:
        lines.append(requirement + " \\")
        lines += ["    --hash=sha256:%s%s" % (sha, " \\" if i < len(hashes) - 1 else "") for i, sha in enumerate(hashes)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_every_pinned_file_goes_into_an_index_pip_installs_from(tmp_path, index, capsys):
    served, sha = index
    any_wheel, arm_wheel = "demo_pkg-1.0-py3-none-any.whl", "demo_pkg-1.0-cp313-cp313-manylinux_2_17_aarch64.whl"
    requirements = lock(tmp_path / "app.lock", ("Demo_Pkg==1.0", [sha[any_wheel], sha[arm_wheel]]),
                        ("other==2.0", [sha["other-2.0-py3-none-any.whl"]]))
    bundle = tmp_path / "bundle.new"
    bundle_wheels.main(str(bundle), served.url + "/simple", str(tmp_path / "bundle"), [requirements])
    report = capsys.readouterr().out
    assert sorted(p.name for p in (bundle / "pypi" / "files").iterdir()) == sorted(
        [any_wheel, arm_wheel, "other-2.0-py3-none-any.whl"])
    assert '"packages": 2, "files": 3' in report
    page = (bundle / "pypi" / "simple" / "demo-pkg" / "index.html").read_text()
    assert "../../files/%s#sha256=%s" % (any_wheel, sha[any_wheel]) in page and "0.9" not in page
    assert 'href="demo-pkg/"' in (bundle / "pypi" / "simple" / "index.html").read_text()
    # pip itself, as the anaconda role runs it: --require-hashes against the bundle's index, nothing else.
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--no-cache-dir",
                           "--isolated", "--index-url", (bundle / "pypi" / "simple").as_uri() + "/", "-r", requirements,
                           "-d", str(tmp_path / "got")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {p.name for p in (tmp_path / "got").iterdir()} == {any_wheel, "other-2.0-py3-none-any.whl"}


def test_a_pin_the_index_has_no_file_for_stops_naming_it(tmp_path, index):
    served, sha = index
    requirements = lock(tmp_path / "app.lock", ("demo-pkg==1.0", [sha["demo_pkg-1.0-py3-none-any.whl"]]),
                        ("demo-pkg==1.1", ["ab" * 32]), ("absent==1.0", ["cd" * 32]))
    with pytest.raises(SystemExit, match=r"for 2 package\(s\): demo-pkg==1\.1 \(http://.*/simple/demo-pkg/, in app\.lock\); "
                                         r"absent==1\.0 \(http://.*/simple/absent/"):
        bundle_wheels.main(str(tmp_path / "new"), served.url + "/simple/", str(tmp_path / "old"), [requirements])


def test_a_download_whose_hash_differs_is_not_taken(tmp_path, index):
    served, sha = index
    served.tampered.add("/packages/other-2.0-py3-none-any.whl")
    requirements = lock(tmp_path / "app.lock", ("other==2.0", [sha["other-2.0-py3-none-any.whl"]]))
    with pytest.raises(SystemExit, match="other-2.0-py3-none-any.whl has SHA-256 [0-9a-f]{64}, the requirement pins"):
        bundle_wheels.main(str(tmp_path / "new"), served.url + "/simple/", str(tmp_path / "old"), [requirements])
    assert not list((tmp_path / "new" / "pypi" / "files").iterdir())


def test_files_the_last_bundle_holds_are_not_downloaded_again(tmp_path, index):
    served, sha = index
    requirements = lock(tmp_path / "app.lock", ("other==2.0", [sha["other-2.0-py3-none-any.whl"]]))
    bundle_wheels.main(str(tmp_path / "bundle"), served.url + "/simple/", str(tmp_path / "none"), [requirements])
    served.served.clear()
    bundle_wheels.main(str(tmp_path / "bundle.new"), served.url + "/simple/", str(tmp_path / "bundle"), [requirements])
    assert served.served == ["/simple/other/"]
    assert (tmp_path / "bundle.new" / "pypi" / "files" / "other-2.0-py3-none-any.whl").exists()
