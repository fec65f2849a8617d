"""The documentation holds together: every relative link resolves, and the README stays a first page.

Links are read from README.md and docs/*.md outside fenced code blocks and inline code. A link to a
file must name one that exists (relative to the page); a ``#anchor`` on a Markdown page (or alone, for
the page itself) must match one of its headings as GitHub slugs them.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250
PARAGRAPH_MAX_WORDS = 150

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text with fenced code blocks blanked out (line numbers kept)."""
    out, fence = [], None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append("")
        else:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to '-'."""
    text = _CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*_]{1,3}(\S(?:.*?\S)?)[*_]{1,3}", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor GitHub gives the headings of a Markdown page (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(page.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link and image of a page, outside code."""
    found = []
    for number, line in enumerate(prose_lines(page.read_text(encoding="utf-8")), 1):
        line = _CODE_SPAN.sub("", line)
        found.extend((number, m.group(1)) for m in _LINK.finditer(line))
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the relative links of one page (named relative to root), one line each."""
    problems = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
            continue  # http:, https:, mailto:: not checked here
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(root)}:{number}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading with the anchor #{anchor} in {dest.name}")
    return problems


def paragraphs(text: str) -> list[str]:
    """Prose blocks between blank lines (code blocks left out); each item of a list counts alone."""
    blocks: list[list[str]] = [[]]
    for line in prose_lines(text):
        if not line.strip():
            blocks.append([])
        elif _BULLET.match(line) or line.lstrip().startswith("|"):
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return [" ".join(b) for b in blocks if b]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    """Every relative link of the page names an existing file, and an existing heading for #anchors."""
    assert links(page) or page.name != "README.md", "README.md has no links: the link reader is broken"
    assert broken_links(page) == []


def test_slugs_follow_github() -> None:
    """Headings with code, punctuation and non-ASCII letters get GitHub's anchors."""
    assert slug("`curate pack` and `curate verify`: packed shards") == "curate-pack-and-curate-verify-packed-shards"
    assert slug("Images as bytes: Parquet, Cauldron/FineVision") == "images-as-bytes-parquet-cauldronfinevision"
    assert slug("Scale: workers, Ray — and 85M samples") == "scale-workers-ray--and-85m-samples"


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    """The checker reports a missing file and a missing anchor, and ignores links in code."""
    (tmp_path / "a.md").write_text("# Title\n\n## Real heading\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#real-heading) [gone](missing.md) [bad](a.md#nowhere)\n"
                    "`[code](missing2.md)`\n\n```\n[fenced](missing3.md)\n```\n", encoding="utf-8")
    problems = broken_links(page, root=tmp_path)
    assert len(problems) == 2, problems
    assert "missing.md" in problems[0] and "#nowhere" in problems[1]


def test_readme_is_a_first_page() -> None:
    """README.md is at most 250 lines and none of its paragraphs (or list items) passes 150 words."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    long = [(len(p.split()), p[:80]) for p in paragraphs(text) if len(p.split()) > PARAGRAPH_MAX_WORDS]
    assert long == []
