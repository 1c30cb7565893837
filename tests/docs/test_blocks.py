"""How the documentation's code blocks are read: markers, options, chains, problems."""

from __future__ import annotations

from pathlib import Path

from tests.docs.blocks import Page, chains, read


def page(tmp_path: Path, text: str) -> tuple[Page, str]:
    path = tmp_path / "guide.md"
    path.write_text(text, encoding="utf-8")
    return read(path), str(path)


def test_markers_options_and_indented_blocks(tmp_path: Path) -> None:
    found, name = page(
        tmp_path,
        "Intro\n"
        "<!-- runnable: postgresql, sqlite -->\n"
        "```sql\nSELECT 1;\n```\n\n"
        "- in a list:\n\n"
        "  <!-- runnable -->\n"
        "  ```python\n  x = 1\n\n  print(x)\n  ```\n"
        "  <!-- runnable: continues -->\n"
        "  ```sh\n  echo $x\n  ```\n\n"
        "<!-- not runnable: needs a server -->\n"
        "```bash\nserve\n```\n\n"
        "```\na tree, no marker needed\n```\n",
    )
    assert found.problems == []
    sql, python, shell, server = found.blocks
    assert (sql.language, sql.line, sql.databases, sql.source) == (
        "sql",
        3,
        ("sqlite", "postgresql"),
        "SELECT 1;\n",
    )
    assert (python.line, python.first_line) == (10, 11)
    assert python.source == "x = 1\n\nprint(x)\n"  # the list's indentation removed
    assert (shell.language, shell.continues) == ("sh", True)
    assert (server.runnable, server.reason) == (False, "needs a server")
    (first, second) = chains([found])[0]
    assert first.blocks == [sql]
    assert second.blocks == [python, shell]
    assert second.where == f"{name}:10"


def test_every_problem_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    found, name = page(
        tmp_path,
        "```python\nunmarked = True\n```\n"
        "<!-- runnable -->\n\n"
        "<!-- not runnable -->\n```sh\nx\n```\n"
        "<!-- runnable: mysql -->\n```sql\nSELECT 1;\n```\n"
        "<!-- runnable -->\n```yaml\na: 1\n```\n"
        "<!-- runnable: continues -->\n```python\nx = 1\n```\n",
    )
    grouped, chain_problems = chains([found])
    assert found.problems == [
        f"{name}:1: this ```python block needs <!-- runnable --> (the suite runs it) or "
        "<!-- not runnable: why --> on the line before it",
        f"{name}:4: a runnable/not runnable marker must be the line right before a code "
        "block's opening fence",
        f"{name}:7: say why: <!-- not runnable: the reason -->",
        f"{name}:11: unknown runnable option(s) mysql; known: continues, postgresql, sqlite",
        f"{name}:15: only python, sh and sql blocks are run; drop the marker of this ```yaml block",
    ]
    assert chain_problems == [
        f"{name}:19: 'continues' needs a runnable python or sh block before it on the page"
    ]
    assert len(grouped) == 1  # the sql block (its bad option left it on SQLite)
