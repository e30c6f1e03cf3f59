"""Open the report in a real headless Chromium: it loads, has its sections, runs no script, and draws.

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it where apt is available). Where it
is missing and apt is not available, the test is skipped with the reason; where apt is available
it must be installed, so the test fails instead of silently skipping.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
SECTIONS = ["verdict", "memorization", "mia", "training", "canaries", "provenance"]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if shutil.which("apt-get"):
        pytest.fail(
            "chromium is missing but apt-get is available: install it with "
            "`apt-get update && apt-get install -y chromium` (.ci/run does this)."
        )
    reason = "headless browser test skipped: chromium is not installed and apt-get is not available to install it"
    print(reason)
    pytest.skip(reason)


def _run(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HOME": str(profile)},
    )


def _dump_dom(browser: str, tmp_path: Path, page: Path) -> str:
    result = _run(browser, tmp_path / "profile-dom", "--dump-dom", page.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _length(value: str | None) -> float:
    match = re.fullmatch(r"\s*([0-9.]+)\s*(pt|px)?\s*", value or "")
    return float(match.group(1)) if match else 0.0


def test_detector_sees_a_script_that_runs(tmp_path: Path, parse_html) -> None:
    """Positive control: without the CSP the same payload runs and the DOM check below catches it."""
    browser = _chromium()
    page = tmp_path / "control.html"
    page.write_text(
        "<!DOCTYPE html><html><body><p>x</p>"
        "<script>document.documentElement.setAttribute('data-pwned','1')</script></body></html>"
    )
    dom = parse_html(_dump_dom(browser, tmp_path, page))
    assert any(tag == "html" and attrs.get("data-pwned") == "1" for tag, attrs in dom.tags)


def test_report_in_headless_chromium(attack_dir: Path, tmp_path: Path, parse_html) -> None:
    browser = _chromium()
    page = attack_dir / "index.html"
    shot = tmp_path / "report.png"
    # one browser run: the DOM after load on stdout, and the screenshot
    result = _run(
        browser, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,3000", "--dump-dom", page.as_uri()
    )
    assert result.returncode == 0, result.stderr[-2000:]
    if not shot.is_file():  # an older headless mode does one action per run
        _run(browser, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1280,3000", page.as_uri())
    assert shot.is_file(), result.stderr[-2000:]
    print(f"report screenshot: {shot}")
    dom = parse_html(result.stdout)
    ids = [attrs.get("id") for tag, attrs in dom.tags if tag == "section"]
    assert ids == SECTIONS  # loaded, with its sections in order
    text = " ".join(dom.text)
    assert "Privacy audit" in text and "<script>alert(1)</script>" in text and '"><img src=x onerror=alert(1)>' in text
    # no script ran: nothing an injected script would add, no element an injection would create
    html_attrs = next(attrs for tag, attrs in dom.tags if tag == "html")
    assert "data-pwned" not in html_attrs
    assert not [tag for tag, _ in dom.tags if tag in ("script", "img", "iframe", "object", "embed")]
    assert not [name for _, attrs in dom.tags for name in attrs if name.startswith("on")]
    # every SVG has a nonzero size
    svgs = [attrs for tag, attrs in dom.tags if tag == "svg"]
    assert len(svgs) == 4
    for attrs in svgs:
        assert _length(attrs.get("width")) > 0 and _length(attrs.get("height")) > 0, attrs
        view = [float(v) for v in (attrs.get("viewbox") or "").split()]
        assert len(view) == 4 and view[2] > 0 and view[3] > 0, attrs

    # the screenshot is not blank: many colours, a real share of non-background pixels
    from PIL import Image

    image = np.asarray(Image.open(shot).convert("RGB"))
    assert image.shape[:2] == (3000, 1280)
    packed = (image[..., 0].astype(np.int32) << 16) | (image[..., 1].astype(np.int32) << 8) | image[..., 2]
    colours = len(np.unique(packed))
    background = np.all(image == image[5, 5], axis=-1).mean()
    assert colours > 50 and background < 0.97, (colours, background)
    # the plot colours are on screen (the first series' blue of the exposure figure)
    assert np.all(np.abs(image.astype(int) - [0x00, 0x72, 0xB2]) <= 8, axis=-1).sum() > 100


def _cells(dom_html: str) -> list[list[str]]:
    """The rows of the comparison table as the browser's DOM holds them, each a list of its cells' text."""
    import html as html_lib

    table = dom_html[dom_html.index('<table id="models-table">') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r'<tr class="model-row">(.*?)</tr>', table, flags=re.DOTALL)
    return [
        [
            " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", c)).split())
            for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.DOTALL)
        ]
        for row in rows
    ]


def test_comparison_table_rows_in_headless_chromium(models_page, tmp_path: Path, parse_html) -> None:
    """The comparison page opens with the models table in a real browser: one row per model (the model attacked twice
    is one row), its label, claim, utility beside the baseline, and n/a where the non-members cannot measure a TPR."""
    browser = _chromium()
    page, dirs = models_page
    dom = _dump_dom(browser, tmp_path, page)
    ids = [attrs.get("id") for tag, attrs in parse_html(dom).tags if tag == "section"]
    assert ids == ["models", *SECTIONS]  # the table comes first
    rows = _cells(dom)
    assert [(r[0].split()[0], r[1]) for r in rows] == [
        ("eps2-model", "2.00"),
        ("non-private", "inf"),
        ("eps8-model", "8.00"),
    ]
    assert all(len(r) == 8 for r in rows)
    assert str(dirs["eps2-membership"]) in rows[0][0] and rows[0][7].startswith("n/a (needs >= 100 non-members")
    assert rows[1][2].startswith("45.0% (5.0%)")
