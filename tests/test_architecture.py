"""The package's shape: no import cycles, and no training driver imports another.

Imports inside functions count: a lazy import is still a dependency, and a cycle of lazy imports
still means two modules that cannot be read (or moved) apart.
"""

import ast
from pathlib import Path

import tunix_lite

PACKAGE = Path(tunix_lite.__file__).parent

# The modules that drive one algorithm's run. Whatever two of them share lives below them.
DRIVERS = {
    "tunix_lite.training.sft",
    "tunix_lite.preference.dpo",
    "tunix_lite.preference.reward_model",
    "tunix_lite.rl.grpo",
    "tunix_lite.rl.ppo",
    "tunix_lite.rl.agent",
    "tunix_lite.distill.distill",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Every tunix_lite module `path` imports, at any depth of its syntax tree."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import module` imports the module; `from module import name` the module.
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name.startswith("tunix_lite."):
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: imports_of(path, modules) - {name} for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_driver_exists():
    assert DRIVERS <= set(import_graph()), DRIVERS - set(import_graph())


def test_no_import_cycle_in_the_package():
    assert cycles(import_graph()) == []


def test_no_training_driver_imports_another():
    graph = import_graph()
    crossings = sorted((driver, other) for driver in DRIVERS for other in graph[driver] & DRIVERS)
    assert crossings == []


def course_sources() -> dict[str, str]:
    """The Python of every notebook (its jupytext pair), solution and exercise notebook."""
    import nbformat

    root = PACKAGE.parent
    sources = {str(p.relative_to(root)): p.read_text() for p in sorted(root.glob("notebooks/*.py"))}
    for path in sorted([*root.glob("solutions/*.ipynb"), *root.glob("exercises/*.ipynb")]):
        cells = nbformat.read(path, as_version=4).cells
        code = [c.source for c in cells if c.cell_type == "code"]
        # IPython lines (%matplotlib, !pip) are not Python; the imports around them are
        sources[str(path.relative_to(root))] = "\n".join(
            line for cell in code for line in cell.splitlines() if not line.lstrip().startswith(("%", "!")))
    return sources


def test_every_library_name_the_course_imports_exists():
    """A renamed or moved function must not leave a notebook or an exercise importing its old name."""
    import importlib.util

    missing = []
    for where, source in course_sources().items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tunix_lite"):
                module = importlib.import_module(node.module)
                missing += [f"{where}:{node.lineno}: {node.module}.{alias.name}" for alias in node.names
                            if not hasattr(module, alias.name)
                            and importlib.util.find_spec(f"{node.module}.{alias.name}") is None]
            elif isinstance(node, ast.Import):
                missing += [f"{where}:{node.lineno}: {alias.name}" for alias in node.names
                            if alias.name.startswith("tunix_lite")
                            and importlib.util.find_spec(alias.name) is None]
    assert missing == []
