"""The fenced code blocks of README.md and docs/*.md, and what each says about running.

Every `python`, `sh` (`bash`, `shell`) and `sql` block carries one of two markers, an
HTML comment on the line right before its fence (GitHub shows neither the comment nor
anything else of it, and still highlights the block):

- `<!-- runnable -->` — the test suite runs the block as written
  (`tests/docs/test_snippets.py`). Options after a colon, comma-separated:
  `sqlite` and/or `postgresql` (the database it runs against; default SQLite), and
  `continues` (the block carries on from the page's previous runnable block: same
  working directory, and Python blocks share one interpreter);
- `<!-- not runnable: why -->` — it cannot run as written (a fragment of a larger
  program, a server that runs until stopped, Docker, a network, sudo); the reason is
  required.

Blocks in other languages (a directory tree, a template) need no marker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANGUAGES = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
LANGUAGES["sql"] = "sql"
DATABASES = ("sqlite", "postgresql")
OPTIONS = {*DATABASES, "continues"}

_FENCE = re.compile(r"^(?P<indent>[ ]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>not runnable|runnable)\b(?P<rest>.*?)-->\s*$")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass
class Block:
    path: Path
    #: 1-based line of the opening fence.
    line: int
    language: str
    #: The block's text, its fence's indentation removed.
    source: str
    runnable: bool | None = None
    databases: tuple[str, ...] = ()
    continues: bool = False
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{_shown(self.path)}:{self.line}"

    @property
    def first_line(self) -> int:
        """1-based line of the block's first line of code."""
        return self.line + 1


@dataclass
class Chain:
    """Blocks that run together: a runnable block and the ones that continue it."""

    blocks: list[Block] = field(default_factory=list)

    @property
    def head(self) -> Block:
        return self.blocks[0]

    @property
    def where(self) -> str:
        return self.head.where


@dataclass
class Page:
    blocks: list[Block]
    problems: list[str]


def read(path: Path) -> Page:
    """The checked blocks of one page, with every marker problem found on the way."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = _shown(path)
    blocks: list[Block] = []
    problems: list[str] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            marker = _MARKER.match(lines[index])
            followed = index + 1 < len(lines) and _FENCE.match(lines[index + 1])
            if marker is not None and not followed:
                problems.append(
                    f"{rel}:{index + 1}: a runnable/not runnable marker must be the line "
                    "right before a code block's opening fence"
                )
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        info = opening["info"].strip()
        language = info.split()[0].lower() if info else ""
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not _closes(lines[end], fence):
            line = lines[end]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            end += 1
        marker = _MARKER.match(lines[index - 1]) if index > 0 else None
        block = Block(path, index + 1, LANGUAGES.get(language, language), "\n".join(body) + "\n")
        if marker is not None:
            problems += _apply(block, marker["kind"], marker["rest"].strip())
        if block.language in set(LANGUAGES.values()):
            if marker is None:
                problems.append(
                    f"{block.where}: this ```{language} block needs <!-- runnable --> "
                    "(the suite runs it) or <!-- not runnable: why --> on the line before it"
                )
            blocks.append(block)
        elif marker is not None:
            problems.append(
                f"{block.where}: only python, sh and sql blocks are run; drop the marker "
                f"of this {'```' + language if language else 'plain'} block"
            )
        index = end + 1
    return Page(blocks, problems)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence) and set(stripped) == {fence[0]}


def _apply(block: Block, kind: str, rest: str) -> list[str]:
    if kind == "not runnable":
        block.runnable = False
        block.reason = rest.removeprefix(":").strip()
        if not rest.startswith(":") or not block.reason:
            return [f"{block.where}: say why: <!-- not runnable: the reason -->"]
        return []
    block.runnable = True
    words = [w.strip() for w in rest.removeprefix(":").split(",") if w.strip()]
    if rest and not rest.startswith(":"):
        return [f"{block.where}: write options after a colon: <!-- runnable: postgresql -->"]
    unknown = [w for w in words if w not in OPTIONS]
    if unknown:
        return [
            f"{block.where}: unknown runnable option(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(OPTIONS))}"
        ]
    block.continues = "continues" in words
    block.databases = tuple(d for d in DATABASES if d in words)
    if block.continues and block.databases:
        return [f"{block.where}: a block that continues runs on its chain's database"]
    return []


def chains(pages: list[Page]) -> tuple[list[Chain], list[str]]:
    """The runnable blocks grouped into chains, and the problems of grouping them."""
    found: list[Chain] = []
    problems: list[str] = []
    for page in pages:
        current: Chain | None = None
        for block in page.blocks:
            if not block.runnable:
                continue
            if block.continues:
                if current is None or "sql" in (block.language, current.head.language):
                    problems.append(
                        f"{block.where}: 'continues' needs a runnable python or sh block "
                        "before it on the page"
                    )
                    continue
                current.blocks.append(block)
                continue
            current = Chain([block])
            found.append(current)
    return found, problems


def collect() -> tuple[list[Chain], list[str]]:
    """Every runnable chain of README.md and docs/*.md, and every marker problem."""
    pages = [read(path) for path in documents()]
    found, problems = chains(pages)
    return found, [problem for page in pages for problem in page.problems] + problems
