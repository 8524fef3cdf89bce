# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Markdown document the project's files cite by file name is in the project: a reader of a clone, or of the installed
collection, can open it. Notes kept outside the repository are no citation."""

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[3]
CITED = re.compile(r"\b([A-Za-z0-9_-]+\.md)\b")


def tracked_text_files():
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    for name in filter(None, names):
        path = ROOT / name
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 2_000_000:
            try:
                yield name, path.read_text()
            except UnicodeDecodeError:
                continue


def test_every_cited_markdown_document_is_in_the_project():
    files = dict(tracked_text_files())
    present = {pathlib.PurePath(name).name for name in files}
    missing = sorted({"%s (cited in %s)" % (cited, name) for name, text in files.items() for cited in CITED.findall(text)
                      if cited not in present})
    assert missing == []
