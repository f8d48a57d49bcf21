"""The package's shape: floors of rooms with every import pointing down, no import cycles, no
training driver importing another, no module reaching into another's private names, a short top
level, and every former import path still leading to the same objects.

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


# The floors, lowest first: a room (a package, or a module at the top level) imports from its own
# room and from rooms on lower floors, never from a room above it or beside it.
FLOORS = (
    ("rewards", "chat", "sharding", "quantize", "compile_cache", "configs"),  # leaves
    ("models",),
    ("tokenizer",),                     # reads a checkpoint's config (models.config)
    ("data", "weights", "sampler"),
    ("evaluation", "lora"),             # evaluation: the sampler and the data; lora: weights.hf
    ("loading", "export"),
    ("training",),
    ("preference", "distill", "planner"),
    ("rl",),                            # a reward model can be a reward (preference.reward_model)
    ("pipeline", "course"),
    ("cli", "tunix_lite"),              # the command line; the package's own `load`
)
FLAT_MODULES_AT_MOST = 12


def room(module: str) -> str:
    """The room a module stands in: the first name under tunix_lite (the package itself: its own)."""
    return module.split(".")[1] if "." in module else module


def floor(module: str) -> int:
    return next(i for i, rooms in enumerate(FLOORS) if room(module) in rooms)


def test_every_module_stands_in_a_room_on_a_floor():
    rooms = {name for floor_rooms in FLOORS for name in floor_rooms}
    assert sorted({room(m) for m in import_graph()} - rooms) == []
    assert sorted(rooms - {room(m) for m in import_graph()}) == []  # no room left empty


def test_no_module_imports_from_a_room_above_or_beside_its_own():
    arrows = sorted(f"{module} -> {target} (floor {floor(module)} -> {floor(target)})"
                    for module, targets in import_graph().items() for target in targets
                    if room(target) != room(module) and floor(target) >= floor(module))
    assert arrows == []


def test_the_top_level_holds_at_most_a_dozen_modules():
    flat = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert len(flat) <= FLAT_MODULES_AT_MOST, flat
    assert (PACKAGE / "rewards").is_dir() and (PACKAGE / "evaluation").is_dir()


def private_imports(path: Path, modules: set[str]) -> list[str]:
    """`from tunix_lite.x import _y`, and `module._y` on a tunix_lite module `path` imported, where
    x is not `path`'s own module: a private name used across modules."""
    own = module_name(path)
    tree = ast.parse(path.read_text())
    found, bound = [], {}  # bound: local name -> the tunix_lite module it names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tunix_lite"):
            for alias in node.names:
                if alias.name.startswith("_") and node.module != own:
                    found.append(f"{own}:{node.lineno}: from {node.module} import {alias.name}")
                if f"{node.module}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules and alias.asname:
                    bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                and node.value.id in bound and bound[node.value.id] != own):
            found.append(f"{own}:{node.lineno}: {bound[node.value.id]}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names():
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    assert [line for path in paths.values() for line in private_imports(path, modules)] == []


# Where a name lived before the library moved into rooms, and where it lives now: the course, its
# notes and learners' own code import the former paths, which must give the very same objects.
FORMER_NAMES = {
    "tunix_lite.data.synthetic.answer_of": "tunix_lite.rewards.tags.answer_of",
    "tunix_lite.data.synthetic.reward_exact_match": "tunix_lite.rewards.tags.reward_exact_match",
    "tunix_lite.data.synthetic.reward_format": "tunix_lite.rewards.tags.reward_format",
    "tunix_lite.data.synthetic.reward_reasoning_format":
        "tunix_lite.rewards.tags.reward_reasoning_format",
    "tunix_lite.data.synthetic.has_reasoning": "tunix_lite.rewards.tags.has_reasoning",
    "tunix_lite.data.synthetic.write_completion": "tunix_lite.rewards.tags.write_completion",
    "tunix_lite.data.synthetic.ANSWER_OPEN": "tunix_lite.rewards.tags.ANSWER_OPEN",
    "tunix_lite.data.synthetic.STYLES": "tunix_lite.rewards.tags.STYLES",
    "tunix_lite.data.reasoning_gym.reward_reasoning_gym":
        "tunix_lite.rewards.reasoning_gym.reward_reasoning_gym",
    "tunix_lite.data.reasoning_gym_scorer.score_entry":
        "tunix_lite.rewards.reasoning_gym_scorer.score_entry",
    "tunix_lite.verifiers.VerifierPool": "tunix_lite.rewards.verifiers.VerifierPool",
    "tunix_lite.verifiers.check_code": "tunix_lite.rewards.verifiers.check_code",
    "tunix_lite.verifiers.reward_math": "tunix_lite.rewards.verifiers.reward_math",
    "tunix_lite.sandbox.run_untrusted": "tunix_lite.rewards.sandbox.run_untrusted",
    "tunix_lite.sandbox_child.to_plain": "tunix_lite.rewards.sandbox_child.to_plain",
    "tunix_lite.math_answers.check_math": "tunix_lite.rewards.math_answers.check_math",
    "tunix_lite.rl.rewards.Rewards": "tunix_lite.rewards.functions.Rewards",
    "tunix_lite.rl.rewards.RewardError": "tunix_lite.rewards.functions.RewardError",
    "tunix_lite.rl.rewards.overlong_penalty": "tunix_lite.rewards.functions.overlong_penalty",
    "tunix_lite.rl.rewards.reward_set": "tunix_lite.rewards.functions.reward_set",
    "tunix_lite.rl.rewards.REWARD_FUNCTIONS": "tunix_lite.rewards.functions.REWARD_FUNCTIONS",
    "tunix_lite.rl.rollouts.RLConfig": "tunix_lite.rl.config.RLConfig",
    "tunix_lite.evaluation.TaskEval": "tunix_lite.evaluation.accuracy.TaskEval",
    "tunix_lite.evaluation.distinct_prompts": "tunix_lite.evaluation.accuracy.distinct_prompts",
    "tunix_lite.evaluation.answer_budget": "tunix_lite.evaluation.accuracy.answer_budget",
    "tunix_lite.evaluation.wilson": "tunix_lite.evaluation.statistics.wilson",
    "tunix_lite.evaluation.paired_difference": "tunix_lite.evaluation.statistics.paired_difference",
    "tunix_lite.evaluation.reward_for": "tunix_lite.rewards.judge.reward_for",
    "tunix_lite.evaluation.score": "tunix_lite.rewards.judge.score",
    "tunix_lite.evaluation.RIGHT": "tunix_lite.rewards.judge.RIGHT",
    "tunix_lite.reasoning_eval.pass_at_k": "tunix_lite.evaluation.statistics.pass_at_k",
    "tunix_lite.reasoning_eval.majority_at_k": "tunix_lite.evaluation.statistics.majority_at_k",
    "tunix_lite.reasoning_eval.best_of_k": "tunix_lite.evaluation.statistics.best_of_k",
    "tunix_lite.reasoning_eval.evaluate_reasoning":
        "tunix_lite.evaluation.reasoning.evaluate_reasoning",
    "tunix_lite.reasoning_eval.ReasoningReport": "tunix_lite.evaluation.reasoning.ReasoningReport",
    "tunix_lite.reasoning_eval.stage_table": "tunix_lite.evaluation.reports.stage_table",
    "tunix_lite.reasoning_eval.scaling_table": "tunix_lite.evaluation.reports.scaling_table",
    "tunix_lite.reasoning_eval.plot_stages": "tunix_lite.evaluation.reports.plot_stages",
    "tunix_lite.reasoning_eval.plot_scaling": "tunix_lite.evaluation.reports.plot_scaling",
    "tunix_lite.reasoning_eval.write_report": "tunix_lite.evaluation.reports.write_report",
    "tunix_lite.model_eval.eval_records": "tunix_lite.evaluation.model_eval.eval_records",
    "tunix_lite.model_eval.guessing": "tunix_lite.evaluation.model_eval.guessing",
    "tunix_lite.preference.dpo.on_policy_pairs": "tunix_lite.preference.on_policy.on_policy_pairs",
    "tunix_lite.preference.evaluation.answer_flaw": "tunix_lite.rewards.tags.answer_flaw",
    "tunix_lite.training.config.ConfigError": "tunix_lite.training.checked.ConfigError",
    "tunix_lite.training.config.read_yaml": "tunix_lite.training.checked.read_yaml",
    "tunix_lite.training.config.apply_settings": "tunix_lite.training.checked.apply_settings",
    "tunix_lite.training.config.option": "tunix_lite.training.checked.option",
    "tunix_lite.pipeline.source_marker": "tunix_lite.pipeline.state.source_marker",
}


def resolve(dotted: str):
    """The object a dotted name names, as `from a.b import c` finds it."""
    import importlib

    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_every_former_import_path_gives_the_same_object():
    import importlib

    import tunix_lite

    for old, new in tunix_lite.MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
        assert not (PACKAGE.parent / (old.replace(".", "/") + ".py")).exists(), old  # no shim file
    moved = {old: new for old, new in FORMER_NAMES.items() if resolve(old) is not resolve(new)}
    assert moved == {}


def test_the_one_judge_and_the_one_pairing():
    """Training (the task eval), evaluation and on-policy pairs judge with one function, and the
    library has one `on_policy_pairs`."""
    defined = {module_name(p): {n.name for n in ast.parse(p.read_text()).body
                                if isinstance(n, ast.FunctionDef)}
               for p in PACKAGE.rglob("*.py")}
    assert [m for m, names in defined.items() if "on_policy_pairs" in names] == [
        "tunix_lite.preference.on_policy"]
    assert [m for m, names in defined.items() if {"reward_for", "verdict_for"} & names] == [
        "tunix_lite.rewards.judge"]
    graph = import_graph()
    for caller in ("tunix_lite.training.evals", "tunix_lite.evaluation.accuracy",
                   "tunix_lite.evaluation.model_eval", "tunix_lite.preference.on_policy"):
        assert "tunix_lite.rewards.judge" in graph[caller], caller


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
