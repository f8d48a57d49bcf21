"""The no-library rule, checked statically: graded cells may not use the implementation they are graded on.

Each exercise names what it may not use (a phase module's FORBIDDEN, plus graded.ALWAYS_FORBIDDEN: the grader
itself and dynamic imports or eval that would hide a name). The scan reads the cell that defines the exercise
and resolves every name and attribute chain in it through the notebook's imports (after
`from tunix_lite.models import transformer as T`, `T.apply_rope` reads `tunix_lite.models.transformer.apply_rope`)
and reports each forbidden one. A name the graded cells bind themselves (your own `def top_p_filter`) is yours,
not the library's.

This is a rule for honest learners, stated and enforced the same way by `check()` and `tunix-lite grade`;
it does not stop a determined one (course/GRADING.md says what does).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence

from tunix_lite.course.notebook import parse


def aliases(sources: Iterable[str]) -> dict[str, str]:
    """{local name: dotted name} for every import statement anywhere in `sources` (cells)."""
    out: dict[str, str] = {}
    for src in sources:
        tree = parse(src)
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Import):
                for a in node.names:  # `import a.b` binds a; `import a.b as c` binds c to a.b
                    out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _bound(tree: ast.AST) -> set[str]:
    """Names the code binds other than by importing: definitions, assignments, arguments, loop targets."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _chain(node: ast.AST) -> list[str] | None:
    """['T', 'apply_rope'] for T.apply_rope; None when the chain does not start at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def used_names(graded_sources: Sequence[str], import_sources: Sequence[str]) -> set[str]:
    """Every dotted name the graded cells load, resolved through the imports of all cells."""
    trees = [t for t in map(parse, graded_sources) if t is not None]
    table = aliases([*import_sources, *graded_sources])
    own = set().union(*map(_bound, trees)) if trees else set()
    used = set()
    for tree in trees:
        inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}  # keep whole chains only
        for node in ast.walk(tree):
            if id(node) in inner or not isinstance(node, (ast.Attribute, ast.Name)):
                continue
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                continue
            chain = _chain(node)
            if chain is None or chain[0] in own:  # the learner's own name, even if it shadows an import
                continue
            head = table.get(chain[0], chain[0])
            used.add(".".join([head, *chain[1:]]))
    return used


def _matches(used: str, forbidden: str) -> bool:
    # `x.y.z` uses `x.y`; and using the module `x` bare hands out everything inside it
    return used == forbidden or used.startswith(forbidden + ".") or forbidden.startswith(used + ".")


def violations(cells: Sequence[tuple[str, Sequence[str]]], import_sources: Sequence[str],
               forbidden: dict[str, Sequence[str]]) -> dict[str, list[str]]:
    """{exercise: the forbidden names used by the cells that define it}, only for exercises that break the rule.
    `cells` are (source, exercise functions it defines); names resolve through every cell's imports."""
    everything = [src for src, _ in cells]
    out = {}
    for exercise, names in forbidden.items():
        mine = [src for src, defined in cells if exercise in defined]
        used = used_names(mine, [*import_sources, *everything])
        found = sorted({u for u in used for f in names if _matches(u, f)})
        if found:
            out[exercise] = found
    return out
