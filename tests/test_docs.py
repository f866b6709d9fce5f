"""The README stays short and its links resolve; the documentation site builds strictly.

The site is `mkdocs.yml` with `docs/`: every page is in the nav, and `mkdocs build
--strict` passes. Its `validation:` settings make a link or an anchor that does not
resolve a warning, which strict turns into a failure: the last test breaks one link in a
copy of the site and watches the build fail, so the check is known to bite. Links to
other sites are not checked (no network but the package registries).
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# A Markdown link or image: [text](target) and ![alt](target), the target up to a space
# (a title may follow) or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def nav_pages(nav: list[Any]) -> Iterator[str]:
    """Every page path named by a MkDocs nav (nested lists of titles and paths)."""
    for item in nav:
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            for value in item.values():
                if isinstance(value, str):
                    yield value
                else:
                    yield from nav_pages(value)


def site_nav() -> set[str]:
    config = load_config(config_file=str(ROOT / "mkdocs.yml"))
    return set(nav_pages(config["nav"]))


def relative_links(markdown: str) -> list[str]:
    """The link targets of a Markdown text that point into the repository, no anchors."""
    without_code = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    targets = [m[1] for m in LINK.finditer(without_code)]
    return [t.split("#", 1)[0] for t in targets if not EXTERNAL.match(t) and t.split("#")[0]]


def build_site(root: Path, site_dir: Path) -> None:
    config = load_config(config_file=str(root / "mkdocs.yml"), strict=True)
    config["site_dir"] = str(site_dir)
    build(config)


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) < 200


def test_every_relative_link_in_the_readme_resolves() -> None:
    links = relative_links(README.read_text())
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing


def test_every_readme_link_into_the_docs_is_a_page_of_the_site() -> None:
    nav = site_nav()
    pages = [link.removeprefix("docs/") for link in relative_links(README.read_text())]
    outside = [p for p in pages if p.endswith(".md") and p not in nav and not p.startswith("..")]
    assert not outside, outside


def test_every_page_is_in_the_nav() -> None:
    nav = site_nav()
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages
    assert pages - nav == set()
    assert nav - pages == set()


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    build_site(ROOT, tmp_path / "site")
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "concepts" / "replication" / "index.html").exists()


@pytest.mark.parametrize(
    ("page", "link"),
    [
        ("operating/retention.md", "[a page that is not there](../operating/no-such-page.md)"),
        ("clients/client.md", "[an anchor that is not there](../security.md#no-such-section)"),
    ],
)
def test_a_broken_internal_link_fails_the_build(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, page: str, link: str
) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(DOCS, copy / "docs")
    broken = copy / "docs" / page
    broken.write_text(broken.read_text() + f"\nSee {link}.\n")
    with caplog.at_level(logging.WARNING, logger="mkdocs"), pytest.raises(Abort):
        build_site(copy, tmp_path / "site")
    target = link.split("(", 1)[1].rstrip(")")
    assert any(target in r.getMessage() for r in caplog.records), caplog.text
