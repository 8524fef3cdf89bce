# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/bundle/files/bundle_indexes.py: each suite keeps the InRelease its cached indexes belong to."""

import hashlib
import importlib.util
import pathlib

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[4] / "roles" / "bundle" / "files" / "bundle_indexes.py"
spec = importlib.util.spec_from_file_location("bundle_indexes", SCRIPT)
bundle_indexes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bundle_indexes)


def release(*indexes):
    lines = ["-----BEGIN PGP SIGNED MESSAGE-----", "Suite: trixie", "Acquire-By-Hash: yes", "SHA256:"]
    lines += [" %s %8d %s" % (sha, 10, path) for path, sha in indexes]
    return "\n".join(lines + ["-----BEGIN PGP SIGNATURE-----", ""])


def cached(suite, path, content):
    sha = hashlib.sha256(content).hexdigest()
    target = suite / os_dirname(path) / "by-hash" / "SHA256" / sha
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    return path, sha


def os_dirname(path):
    return str(pathlib.PurePosixPath(path).parent)


def test_the_newest_version_that_lists_the_cached_indexes_becomes_inrelease(tmp_path):
    suite = tmp_path / "debian" / "dists" / "trixie"
    main = cached(suite, "main/binary-amd64/Packages.xz", b"main packages")
    contrib = cached(suite, "contrib/binary-amd64/Packages.xz", b"contrib packages")
    newer = ("main/binary-amd64/Packages.xz", "0" * 64)  # indexes the cache never fetched
    (suite / "InRelease").write_text(release(newer, contrib))
    (suite / "InRelease.1795602015").write_text(release(main, contrib))
    (suite / "InRelease.1795601641").write_text(release(main, contrib))
    bundle_indexes.main(str(tmp_path))
    assert sorted(p.name for p in suite.iterdir() if p.is_file()) == ["InRelease"]
    assert (suite / "InRelease").read_text() == release(main, contrib)


def test_a_current_inrelease_that_covers_the_cache_is_kept(tmp_path):
    suite = tmp_path / "debian" / "dists" / "bookworm"
    main = cached(suite, "main/binary-amd64/Packages.xz", b"bookworm")
    (suite / "InRelease").write_text(release(main))
    (suite / "InRelease.100").write_text(release(main))
    bundle_indexes.main(str(tmp_path))
    assert sorted(p.name for p in suite.iterdir() if p.is_file()) == ["InRelease"]


def test_a_suite_no_version_covers_stops_naming_it(tmp_path):
    suite = tmp_path / "debian" / "dists" / "trixie"
    cached(suite, "main/binary-amd64/Packages.xz", b"main packages")
    (suite / "InRelease").write_text(release(("main/binary-amd64/Packages.xz", "1" * 64)))
    with pytest.raises(SystemExit) as stopped:
        bundle_indexes.main(str(tmp_path))
    assert "debian/dists/trixie" in str(stopped.value) and "main/binary-amd64" in str(stopped.value)


class _Proxy(object):
    """An HTTP server answering PATH from a dict (what the proxy would fetch upstream), recording what was asked."""

    def __init__(self, files):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        outer = self
        self.files, self.asked = files, []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.asked.append(self.path)
                body = outer.files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]


def test_indexes_a_node_asks_for_that_the_cache_lacks_are_fetched_by_hash_and_checked(tmp_path):
    suite = tmp_path / "debian" / "dists" / "bookworm"
    contrib = cached(suite, "contrib/binary-amd64/Packages.xz", b"contrib")
    main_packages, translation = b"main packages", b"main translation"
    main = ("main/binary-amd64/Packages.xz", hashlib.sha256(main_packages).hexdigest())
    main_plain = ("main/binary-amd64/Packages", "2" * 64)
    i18n = ("main/i18n/Translation-en.bz2", hashlib.sha256(translation).hexdigest())
    text = release(main_plain, main, contrib, i18n).replace("Suite: trixie", "Components: main contrib")
    (suite / "InRelease").write_text(text)
    proxy = _Proxy({"/debian/dists/bookworm/main/binary-amd64/by-hash/SHA256/" + main[1]: main_packages,
                    "/debian/dists/bookworm/main/i18n/by-hash/SHA256/" + i18n[1]: translation})
    bundle_indexes.main(str(tmp_path), proxy.url)
    assert (suite / "main/binary-amd64/by-hash/SHA256" / main[1]).read_bytes() == main_packages
    assert (suite / "main/i18n/by-hash/SHA256" / i18n[1]).read_bytes() == translation
    assert len(proxy.asked) == 2  # contrib's index was in the cache; the uncompressed Packages is not asked for
    bundle_indexes.main(str(tmp_path), proxy.url)
    assert len(proxy.asked) == 2  # a second build fetches nothing


def test_an_index_that_does_not_match_its_hash_stops_the_build(tmp_path):
    suite = tmp_path / "debian" / "dists" / "bookworm"
    i18n = cached(suite, "main/i18n/Translation-en.bz2", b"x")
    listed = ("main/binary-amd64/Packages.xz", hashlib.sha256(b"the real index").hexdigest())
    (suite / "InRelease").write_text(release(listed, i18n).replace("Suite: trixie", "Components: main"))
    (suite / "main" / "binary-amd64").mkdir(parents=True)
    proxy = _Proxy({"/debian/dists/bookworm/main/binary-amd64/by-hash/SHA256/" + listed[1]: b"something else"})
    with pytest.raises(SystemExit) as stopped:
        bundle_indexes.main(str(tmp_path), proxy.url)
    assert "does not have the SHA-256" in str(stopped.value)
    assert not (suite / "main/binary-amd64/by-hash/SHA256" / listed[1]).exists()


def test_a_flat_repository_keeps_the_version_that_lists_its_packages_file(tmp_path):
    repo = tmp_path / "store" / "vendor" / "libnvidia-container" / "stable" / "deb" / "amd64"
    repo.mkdir(parents=True)
    (repo / "Packages").write_bytes(b"Package: nvidia-container-toolkit\n")
    packages = ("Packages", hashlib.sha256(b"Package: nvidia-container-toolkit\n").hexdigest())
    (repo / "InRelease.1795603383").write_text(release(packages))
    (repo / "InRelease.1795600000").write_text(release(("Packages", "3" * 64)))
    bundle_indexes.main(str(tmp_path), "http://127.0.0.1:9")  # a flat repository is not completed: nothing asked
    assert sorted(p.name for p in repo.iterdir()) == ["InRelease", "Packages"]
    assert (repo / "InRelease").read_text() == release(packages)


def test_a_suite_whose_indexes_the_cache_never_fetched_keeps_its_newest_inrelease(tmp_path):
    suite = tmp_path / "debian" / "dists" / "trixie-updates"
    suite.mkdir(parents=True)
    (suite / "InRelease.200").write_text(release(("main/binary-amd64/Packages.xz", "4" * 64)))
    (suite / "InRelease.100").write_text(release(("main/binary-amd64/Packages.xz", "5" * 64)))
    bundle_indexes.main(str(tmp_path))
    assert sorted(p.name for p in suite.iterdir()) == ["InRelease"]
    assert "4" * 64 in (suite / "InRelease").read_text()
