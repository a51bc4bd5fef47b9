"""Every relative link of README.md and docs/*.md leads somewhere: the file exists, and an anchor
(`path#anchor` or `#anchor`) names a heading of that page as GitHub spells heading anchors."""

import glob
import os
import re
import sys

import pytest

# The checkout the pages belong to: under Bazel the runfiles' README.md (//:README.md) is a link
# into it, and a link may lead to any file of it (sources, tools), which the runfiles do not hold.
ROOT = os.path.dirname(os.path.realpath("README.md"))
PAGES = ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]
LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with inline code spans blanked out."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, INLINE_CODE.sub("``", line)


def anchor_of(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces to -."""
    text = INLINE_CODE.sub(lambda m: m.group(0)[1:-1], heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    """Every heading anchor of the page at `path` (repeats get -1, -2, ... as on GitHub)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    seen = {}
    found = set()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and re.match(r"^#{1,6} ", line):
            base = anchor_of(line.lstrip("#"))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    for number, line in prose_lines(text):
        for match in LINK.finditer(line):
            target = match.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            yield number, target


def broken_links(page):
    """'page:line: target: what is wrong' for every link of `page` (a path under ROOT) that leads nowhere."""
    problems = []
    for number, target in links(page):
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(ROOT, resolved)):
            problems.append(f"{page}:{number}: {target}: no file {resolved}")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(os.path.join(ROOT, resolved)):
            problems.append(f"{page}:{number}: {target}: no heading with anchor #{anchor} in {resolved}")
    return problems


def test_the_pages_are_found():
    assert os.path.join("docs", "BAD_INPUT.md") in PAGES and os.path.join("docs", "USAGE.md") in PAGES, PAGES


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_leads_somewhere(page):
    assert broken_links(page) == []


def test_anchors_are_spelled_as_github_spells_them():
    assert anchor_of("Keys computed before lowering (Intel Xeon with AMX, 2026-11-28)") == (
        "keys-computed-before-lowering-intel-xeon-with-amx-2026-11-28"
    )
    assert anchor_of("Attention masks at T = 4096") == "attention-masks-at-t--4096"
    assert anchor_of("The `transformer` dialect") == "the-transformer-dialect"


def test_a_broken_link_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "A.md").write_text("# A\n\n## Real heading\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/A.md#real-heading) [gone](docs/B.md) [bad anchor](docs/A.md#no-such) `[code](x.md)`\n"
        "```\n[fenced](y.md)\n```\n[self](#a-readme)\n# A README\n"
    )
    assert broken_links("README.md") == [
        "README.md:1: docs/B.md: no file docs/B.md",
        "README.md:1: docs/A.md#no-such: no heading with anchor #no-such in docs/A.md",
    ]
