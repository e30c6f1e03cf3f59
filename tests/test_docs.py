"""The documentation lives in the repository, and every pointer to it resolves there.

Code, comments, tests and the README point at the pages of ``docs/`` by path and section (``docs/privacy.md, "One
example's contribution"``), never at a design document or an issue tracker a reader of the repository cannot open.
These tests fail on a pointer outside the repository ("DESIGN section 4", "DESIGN.md", "issue 29", ``(issue
"hardening")``), on a ``docs/...md`` path that does not exist, on a quoted section that is not a heading of the page
it names, on a relative link between pages that does not resolve, and on a page that the index or the Sphinx
contents leave out. The API reference itself is built by CI (``.ci/run``: ``sphinx -W``), not here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: Pointers to text outside the repository: the former design document and issue numbers or titles.
OUTSIDE_POINTERS = (
    re.compile(r"DESIGN section"),
    re.compile(r"DESIGN\.md"),
    re.compile(r"\bDESIGN\b(?!_)"),  # "DESIGN: the trainer API", "(DESIGN "...")"; not DESIGN_FORMAT, AUDIT_DESIGN
    re.compile(r"\b[Ii]ssues? #?\d+"),
    re.compile(r"\([Ii]ssue\b"),
    re.compile(r"\b[Ii]ssue \""),
)
#: What is not scanned: the virtual environment, and what benchmarks recorded (their outputs quote as they ran).
SKIPPED_PREFIXES = (".venv/", ".git/", "docs/_build/")
DOC_PATH = re.compile(r"\bdocs/([A-Za-z0-9_./-]+\.md)\b")
#: ``docs/PAGE.md, "Section"``: the section a pointer names (it may wrap over lines, comment marks included).
SECTION_POINTER = re.compile(r"\bdocs/([A-Za-z0-9_-]+\.md),\s*\"([^\"]{1,160})\"")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
MARKDOWN_LINK = re.compile(r"\]\(([^)#\s]+\.md)(#[^)]*)?\)")


def _repository_files() -> list[Path]:
    """The files a clone holds (tracked, and new ones git does not ignore), else every file under the root."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout.decode("utf-8")
        names = sorted({name for name in out.split("\0") if name})
    except (OSError, subprocess.SubprocessError):
        names = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file())
    keep = []
    for name in names:
        if name.startswith(SKIPPED_PREFIXES) or "/__pycache__/" in name or ".egg-info/" in name:
            continue
        if name.startswith("benchmarks/") and not name.endswith(".py"):
            continue  # a benchmark's recorded output
        if (ROOT / name).is_file():
            keep.append(ROOT / name)
    return keep


def _text(path: Path) -> str | None:
    """The file's text, or None for a binary file (an image, a wheel)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    """Relative name -> text of every text file scanned (this file names the patterns, so it is left out)."""
    files = {}
    for path in _repository_files():
        if path == Path(__file__).resolve():
            continue
        text = _text(path)
        if text is not None:
            files[path.relative_to(ROOT).as_posix()] = text
    return files


def _headings(page: Path) -> list[str]:
    body = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return [re.sub(r"`", "", h) for h in HEADING.findall(body)]


def _normalized(title: str) -> str:
    """A quoted title as prose: line breaks, comment marks and indentation inside it become one space."""
    return re.sub(r"\s*\n\s*(?:#:?|//)?\s*", " ", title).strip()


def test_no_pointer_leaves_the_repository(texts):
    found = []
    for name, text in texts.items():
        for lineno, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in OUTSIDE_POINTERS):
                found.append(f"{name}:{lineno}: {line.strip()[:120]}")
    assert not found, (
        "pointers to a design document or an issue a reader of the repository cannot open; point at "
        "the docs/ page that holds the content, or drop the number:\n" + "\n".join(found)
    )


def test_every_docs_path_named_exists(texts):
    missing = []
    for name, text in texts.items():
        for match in DOC_PATH.finditer(text):
            target = match.group(1)
            if "_build/" in target or not target.endswith(".md"):
                continue
            if not (DOCS / target).is_file():
                lineno = text.count("\n", 0, match.start()) + 1
                missing.append(f"{name}:{lineno}: docs/{target}")
    assert not missing, "docs pages named but missing:\n" + "\n".join(sorted(set(missing)))


def test_every_quoted_section_is_a_heading_of_its_page(texts):
    wrong = []
    for name, text in texts.items():
        for match in SECTION_POINTER.finditer(text):
            page, title = DOCS / match.group(1), _normalized(match.group(2))
            if not page.is_file():
                continue  # reported by test_every_docs_path_named_exists
            if not any(h == title or h.startswith(title) for h in _headings(page)):
                lineno = text.count("\n", 0, match.start()) + 1
                wrong.append(f"{name}:{lineno}: docs/{match.group(1)} has no section {title!r}")
    assert not wrong, "pointers to sections that do not exist:\n" + "\n".join(wrong)


def test_links_between_pages_resolve():
    broken = []
    for page in sorted(DOCS.glob("*.md")):
        for match in MARKDOWN_LINK.finditer(page.read_text(encoding="utf-8")):
            target = match.group(1)
            if "://" in target:
                continue
            if not (page.parent / target).resolve().is_file():
                broken.append(f"{page.name}: ({target})")
    assert not broken, "links that resolve to no file:\n" + "\n".join(broken)


def test_the_index_and_the_sphinx_contents_list_every_page():
    pages = sorted(p.stem for p in DOCS.glob("*.md") if p.stem != "index")
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    contents = (DOCS / "contents.rst").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s{3}(\S+)\s*$", contents, flags=re.MULTILINE))
    assert [p for p in pages if f"({p}.md)" not in index] == [], "docs/index.md must link every page"
    assert [p for p in [*pages, "index"] if p not in listed] == [], "docs/contents.rst's toctree must list every page"
