"""Every citation points at something a reader can open: an upstream source (repo path:line@tag, issue,
URL) or a file of this repository, never a document kept outside it (issue 39)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORD = "BR" + "IEF"
"""The design notes the project started from live outside the repository; the word is built here so that
this file does not match itself."""
OUTSIDE = re.compile(r"\b" + WORD + r"\b|\.\./shared/")
"""A cite of those notes (the word, then a section number), or a path that climbs out of the checkout."""
SNAPSHOTS = "tests/__snapshots__/"


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    return [name for name in listed.stdout.decode().split("\0") if name]


def citations_outside(text: str) -> list[tuple[int, str]]:
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


def test_the_matcher_finds_each_form_and_not_the_english_word():
    assert citations_outside(f"x = 1\n# the hugepages fact ({WORD} section 2)\n") == [
        (2, f"# the hugepages fact ({WORD} section 2)")]
    assert citations_outside(f"vLLM on the CPU ({WORD} §6)") == [(1, f"vLLM on the CPU ({WORD} §6)")]
    climbing = "Facts: `" + ".." + "/shared/notes.md`"
    assert citations_outside(climbing) == [(1, climbing)]
    assert citations_outside("vLLM briefly holds the window; in brief, a design brief") == []


@pytest.mark.integration
def test_no_tracked_file_cites_a_document_outside_the_repository():
    names = tracked_files()
    assert "README.md" in names and "tests/test_citations.py" in names  # the listing is this checkout's
    found = {}
    for name in names:
        path = ROOT / name
        if name.startswith(SNAPSHOTS) or path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:  # images and other binary files
            continue
        if hits := citations_outside(data.decode("utf-8", errors="replace")):
            found[name] = hits
    assert not found, "cite the upstream source (repo path:line@tag, issue, URL) or a file of this repository"
