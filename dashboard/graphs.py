"""Geometry of a batch's dependency graph, drawn as inline SVG by `batches/_graph.html`.

Layered by depth: a job that waits for nothing drawn here stands in the first column,
a job enqueued `after=` others one column right of its deepest dependency, so every
arrow points right (dependency → dependent). Within a column the jobs are ordered by
the mean row of their dependencies, then by id, which keeps a fan-out's arrows from
crossing each other. The SVG carries a viewBox: on a screen narrower than the graph it
shrinks whole instead of scrolling sideways, and the list beside it says the same in
words.

At most `limit` jobs are drawn: dependents are taken in id order, each with all of its
dependencies, while they fit — a job is never drawn without what it waits for.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NODE_WIDTH = 156
NODE_HEIGHT = 40
#: Room between two columns for the arrows.
COLUMN_GAP = 40
ROW_GAP = 10
PAD = 4
#: A job type longer than this is cut ("report.genera…"); its node's tooltip has it all.
LABEL_CHARS = 20


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    job_type: str | None
    #: None for a dependency that no longer exists (pruned by retention).
    status: str | None
    x: float
    y: float

    @property
    def label(self) -> str:
        name = self.job_type or "(pruned)"
        return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"

    @property
    def title(self) -> str:
        return f"job #{self.id} {self.job_type or '(pruned)'}: {self.status or 'pruned'}"


@dataclass(frozen=True, slots=True)
class Edge:
    dependency: int
    dependent: int
    #: The arrow's SVG path (`d`), from the dependency's right side to the dependent's left.
    path: str


@dataclass(frozen=True, slots=True)
class Dependent:
    """One drawn job and the jobs it waits for, for the graph's text alternative."""

    node: Node
    dependencies: list[Node]


@dataclass(frozen=True, slots=True)
class Graph:
    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int
    #: Some dependents were left out (more than `limit` jobs).
    capped: bool
    limit: int

    @property
    def node_width(self) -> int:
        return NODE_WIDTH

    @property
    def node_height(self) -> int:
        return NODE_HEIGHT

    @property
    def summary(self) -> str:
        jobs = f"{len(self.nodes)} job{'' if len(self.nodes) == 1 else 's'}"
        arrows = f"{len(self.edges)} arrow{'' if len(self.edges) == 1 else 's'}"
        return f"Dependency graph: {jobs}, {arrows} from each job to the jobs that run after it."

    def dependents(self) -> list[Dependent]:
        """Each job that waits for others, with them (in id order)."""
        by_id = {node.id: node for node in self.nodes}
        waits: dict[int, list[Node]] = {}
        for edge in self.edges:
            waits.setdefault(edge.dependent, []).append(by_id[edge.dependency])
        return [
            Dependent(by_id[job_id], sorted(deps, key=lambda n: n.id))
            for job_id, deps in sorted(waits.items())
        ]


def layout(found: Mapping[str, Any], *, limit: int, more: bool = False) -> Graph:
    """Place `found` (`shared.workflows.queries.dependency_graph`'s nodes and edges) in
    columns by depth; `more`: the caller left dependents out already."""
    known = {int(row["id"]): row for row in found["nodes"]}
    edges, capped = _within_limit(found["edges"], limit)
    ids = sorted({job_id for edge in edges for job_id in edge})
    depth = _depths(ids, edges)
    columns: dict[int, list[int]] = {}
    row_of: dict[int, int] = {}
    waits_for: dict[int, list[int]] = {}
    for dep, job in edges:
        waits_for.setdefault(job, []).append(dep)
    for column in range(max(depth.values(), default=-1) + 1):
        members = [job_id for job_id in ids if depth[job_id] == column]

        def place(job_id: int) -> tuple[float, int]:
            rows = [row_of[dep] for dep in waits_for.get(job_id, ()) if dep in row_of]
            return (sum(rows) / len(rows) if rows else 0.0, job_id)

        columns[column] = sorted(members, key=place)
        for row, job_id in enumerate(columns[column]):
            row_of[job_id] = row
    tallest = max((len(members) for members in columns.values()), default=0)
    step = NODE_HEIGHT + ROW_GAP
    nodes: dict[int, Node] = {}
    for column, members in columns.items():
        # A shorter column is centred against the tallest one.
        offset = (tallest - len(members)) * step / 2
        for row, job_id in enumerate(members):
            row_data = known.get(job_id)
            nodes[job_id] = Node(
                id=job_id,
                job_type=None if row_data is None else row_data["job_type"],
                status=None if row_data is None else row_data["status"],
                x=PAD + column * (NODE_WIDTH + COLUMN_GAP),
                y=PAD + offset + row * step,
            )
    drawn = [Edge(dep, job, _arrow(nodes[dep], nodes[job])) for dep, job in edges]
    width = PAD * 2 + len(columns) * NODE_WIDTH + max(len(columns) - 1, 0) * COLUMN_GAP
    height = PAD * 2 + tallest * step - (ROW_GAP if tallest else 0)
    return Graph(
        nodes=sorted(nodes.values(), key=lambda n: n.id),
        edges=drawn,
        width=width if columns else 0,
        height=height if columns else 0,
        capped=capped or more,
        limit=limit,
    )


def _within_limit(edges: Iterable[Sequence[int]], limit: int) -> tuple[list[tuple[int, int]], bool]:
    """The edges of the dependents that fit in `limit` jobs, taken in id order, each
    with all of its dependencies; and whether any was left out."""
    by_dependent: dict[int, list[int]] = {}
    for dep, job in edges:
        by_dependent.setdefault(int(job), []).append(int(dep))
    kept: list[tuple[int, int]] = []
    shown: set[int] = set()
    for job, deps in sorted(by_dependent.items()):
        wanted = shown | {job, *deps}
        if len(wanted) > limit:
            return kept, True
        shown = wanted
        kept.extend((dep, job) for dep in sorted(deps))
    return kept, False


def _depths(ids: Sequence[int], edges: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Each job's column: one more than its deepest dependency's (longest path from a
    job that waits for nothing drawn). `after=` can only name jobs that exist, so the
    graph has no cycle; a job in one anyway keeps the depth reached."""
    depth = dict.fromkeys(ids, 0)
    waiting = dict.fromkeys(ids, 0)
    after: dict[int, list[int]] = {}
    for dep, job in edges:
        waiting[job] += 1
        after.setdefault(dep, []).append(job)
    ready = deque(job_id for job_id in ids if waiting[job_id] == 0)
    while ready:
        job_id = ready.popleft()
        for dependent in after.get(job_id, ()):
            depth[dependent] = max(depth[dependent], depth[job_id] + 1)
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                ready.append(dependent)
    return depth


def _arrow(start: Node, end: Node) -> str:
    """A curve from the middle of `start`'s right side to `end`'s left (the arrowhead's
    marker sits on its end)."""
    x1, y1 = start.x + NODE_WIDTH, start.y + NODE_HEIGHT / 2
    x2, y2 = end.x - 2, end.y + NODE_HEIGHT / 2
    bend = (x2 - x1) / 2
    return f"M{x1:g} {y1:g} C{x1 + bend:g} {y1:g} {x2 - bend:g} {y2:g} {x2:g} {y2:g}"
