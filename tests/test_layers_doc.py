"""The page on layers (docs/development/layers.md) says what `.importlinter` enforces.

Every contract of `.importlinter` appears on the page under its name, as a block
titled `contract: <id>`: a layered contract as its layers top to bottom (a
container's as `# in <container>` first), a forbidden one as its modules and a
`never imports` line. The page has no block for a contract that does not exist, and
every folder its layout names exists.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "development" / "layers.md"
CONTRACTS = ROOT / ".importlinter"

BLOCK = re.compile(r'^```text title="contract: ([\w-]+)"\n(.*?)^```', re.MULTILINE | re.DOTALL)
NEVER = "never imports "


def _lines(value: str) -> list[str]:
    return [line.strip() for line in value.strip().splitlines() if line.strip()]


def _expected(section: configparser.SectionProxy) -> list[str]:
    if section["type"] == "layers":
        container = [f"in {section['containers'].strip()}"] if "containers" in section else []
        return container + [" ".join(layer.split()) for layer in _lines(section["layers"])]
    forbidden = ", ".join(_lines(section["forbidden_modules"]))
    return [*_lines(section["source_modules"]), NEVER + forbidden]


def _shown(block: str) -> list[str]:
    """A block's lines as the contract would list them: explanations after `#` dropped,
    a line that is only an explanation dropped, `# in X` kept as the container."""
    out = []
    for raw in block.splitlines():
        line = raw.strip()
        if line.startswith("# in "):
            out.append(line[2:])
            continue
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(" ".join(line.split()))
    return out


def disagreements(contracts_text: str, page_text: str) -> list[str]:
    """What the page says that the contracts do not, and the other way round."""
    parser = configparser.ConfigParser()
    parser.read_string(contracts_text)
    contracts = {
        name.removeprefix("importlinter:contract:"): parser[name]
        for name in parser.sections()
        if name.startswith("importlinter:contract:")
    }
    blocks = {cid: _shown(body) for cid, body in BLOCK.findall(page_text)}
    problems = []
    for cid, section in contracts.items():
        if f"### {section['name'].strip()}\n" not in page_text:
            problems.append(f"contract {cid!r}: its name is not a heading of the page")
        if cid not in blocks:
            problems.append(f"contract {cid!r}: no block on the page")
        elif blocks[cid] != _expected(section):
            problems.append(f"contract {cid!r}: page {blocks[cid]} != {_expected(section)}")
    problems.extend(
        f"the page shows contract {cid!r}, which .importlinter does not have"
        for cid in blocks.keys() - contracts.keys()
    )
    return problems


def test_the_layers_page_agrees_with_the_contracts() -> None:
    assert disagreements(CONTRACTS.read_text(), PAGE.read_text()) == []


def test_a_layer_moved_in_the_contracts_is_a_disagreement() -> None:
    contracts = CONTRACTS.read_text()
    moved = contracts.replace("    replica_wire\n    core\n", "    core\n    replica_wire\n")
    assert moved != contracts
    problems = disagreements(moved, PAGE.read_text())
    assert len(problems) == 1, problems
    assert "'broker'" in problems[0]


def test_a_contract_missing_from_the_page_is_a_disagreement() -> None:
    page = PAGE.read_text()
    start = page.index('```text title="contract: harness"')
    cut = page[:start] + page[page.index("```\n", start + 3) + 4 :]
    problems = disagreements(CONTRACTS.read_text(), cut)
    assert problems == ["contract 'harness': no block on the page"]


def test_a_forbidden_module_added_to_the_page_only_is_a_disagreement() -> None:
    page = PAGE.read_text().replace(
        "  never imports epochlog_tools.sim\n", "  never imports epochlog_tools.sim, kopf\n"
    )
    problems = disagreements(CONTRACTS.read_text(), page)
    assert len(problems) == 1, problems
    assert "'simulator-apart'" in problems[0]


def test_every_folder_of_the_layout_exists() -> None:
    page = PAGE.read_text()
    layout = page[page.index("## Folders") : page.index("## The contracts")]
    top = ROOT
    checked = 0
    for line in layout.splitlines():
        match = re.match(r"^( *)([\w.-]+(?:/[\w.-]+)*/)(?:\s|$)", line)
        if not match:
            continue
        if match.group(1):
            path = top / match.group(2)
        else:
            path = top = ROOT / match.group(2)
        assert path.is_dir(), line
        checked += 1
    assert checked > 20
