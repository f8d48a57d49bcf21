"""IPython startup file: a cell that opens or lists a file of the source tree outside its notebook's
folder fails with PermissionError, as it would on Colab or Kaggle, where a notebook has nothing of
the repository beside it.

Kernels that start with it: those tests/test_notebooks_from_wheel.py runs notebooks in (from the
wheel, in a stand-in repository), and nbval's kernels for the lessons and solutions (the
repository's conftest.py). A Python audit hook checks every open, listdir, scandir and glob of a
path inside SOURCE_TREE_FORBIDDEN (the repository, or its stand-in). It raises, and records the
path in sys.source_tree_reads, where the path is outside the kernel's working folder and either
outside SOURCE_TREE_ALLOWED (the package, the environment, the compilation cache) or written
relative with a `..` that climbs out of the folder:
`../tunix_lite/configs/x.yaml` is the checkout's copy, which Colab does not have, while the
package's own absolute paths (`tunix_lite.configs.path("x")`) are the installed copy there too.
A cell that catches the error does not hide the read: the next cell fails before it runs.
"""

import ast
import os
import sys

FORBIDDEN = os.environ["SOURCE_TREE_FORBIDDEN"].split(os.pathsep)
HERE = os.getcwd()  # the notebook's folder
ALLOWED = [HERE, *os.environ["SOURCE_TREE_ALLOWED"].split(os.pathsep)]
EVENTS = ("open", "os.listdir", "os.scandir", "glob.glob")
sys.source_tree_reads = []


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _audit(event: str, args: tuple) -> None:
    if event not in EVENTS or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    given = os.fsdecode(args[0])
    named = os.path.abspath(given)
    climbs = not os.path.isabs(given) and ".." in given.split(os.sep)
    for path in (named, os.path.realpath(named)):
        outside = not _inside(path, ALLOWED) or (climbs and not _inside(path, [HERE]))
        if _inside(path, FORBIDDEN) and outside:
            sys.source_tree_reads.append(given)
            raise PermissionError(f"a cell reads {given!r}, a file of the source tree "
                                  "outside the notebook's folder: on Colab or Kaggle it is not there")


sys.addaudithook(_audit)


def _no_caught_reads() -> None:
    if sys.source_tree_reads:
        raise PermissionError(f"an earlier cell read {sys.source_tree_reads} and caught the error: "
                              "on Colab or Kaggle those files are not there")


class _CheckFirst(ast.NodeTransformer):
    """Start every cell with `sys.no_caught_source_tree_reads()` (after its __future__ imports)."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        first = next((i for i, s in enumerate(node.body)
                      if not (isinstance(s, ast.ImportFrom) and s.module == "__future__")),
                     len(node.body))
        check = ast.parse("__import__('sys').no_caught_source_tree_reads()").body
        node.body[first:first] = check
        return ast.fix_missing_locations(node)


sys.no_caught_source_tree_reads = _no_caught_reads
get_ipython().ast_transformers.append(_CheckFirst())  # noqa: F821 (an IPython startup file)
