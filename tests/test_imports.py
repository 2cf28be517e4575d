"""The layering a reader relies on, from the source: every ``import`` of the package, function-level
ones included, forms a graph without cycles, and ``trainer.results`` reaches no TensorFlow, Keras,
training code or claim through it."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "trainer"
HEAVY = ("tensorflow", "keras", "tf_keras")  # the training stack results/ must never load


def _name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _resolve(node: ast.ImportFrom, importer: str) -> str:
    """The absolute module an ``ImportFrom`` names (relative ones resolved against ``importer``)."""
    if not node.level:
        return node.module
    package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def imported(source: str, importer: str, on_import_only: bool = False) -> set[str]:
    """Every module ``source`` imports anywhere (module level, functions, classes), absolute:
    ``from trainer.x import y`` names ``trainer.x.y`` when y is a module of the package, and
    ``importlib.import_module("literal")`` counts. Imports under ``if TYPE_CHECKING:`` never run
    and are left out; ``on_import_only``: those inside functions too (they run when called)."""
    found: set[str] = set()
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if on_import_only and isinstance(child, functions):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                module = _resolve(child, importer)
                found.add(module)
                found.update(f"{module}.{a.name}" for a in child.names
                             if f"{module}.{a.name}" in MODULES)
            elif (isinstance(child, ast.Call) and ast.unparse(child.func).endswith("import_module")
                  and child.args and isinstance(child.args[0], ast.Constant)):
                found.add(child.args[0].value)
            visit(child)

    visit(ast.parse(source))
    return found


def _graph() -> dict[str, set[str]]:
    """Module -> the package modules importing it runs: the modules it names and their packages'
    ``__init__`` (except packages the importer itself is inside: those are running already)."""
    graph = {}
    for module, path in MODULES.items():
        edges = set()
        for target in imported(path.read_text(encoding="utf-8"), module):
            for name in [*_ancestors(target), target]:
                if name in MODULES and name != module and name not in _ancestors(module):
                    edges.add(name)
        graph[module] = edges
    return graph


def _external(module: str) -> set[str]:
    return {m for m in imported(MODULES[module].read_text(encoding="utf-8"), module)
            if m.split(".")[0] != "trainer"}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or None (depth-first, iterative)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def reachable(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` runs, directly or through others: module -> the one importing it."""
    via, todo = {start: ""}, [start]
    while todo:
        module = todo.pop()
        for target in graph[module]:
            if target not in via:
                via[target] = module
                todo.append(target)
    return via


def _chain(via: dict[str, str], module: str) -> str:
    chain = [module]
    while via[chain[-1]]:
        chain.append(via[chain[-1]])
    return " <- ".join(chain)


def test_the_walker_sees_every_import_resolved():
    src = ("import os\nfrom . import palette\nfrom ..train import loop\n"
           "def f():\n    from trainer.findings import core\n    import keras.ops\n"
           "class C:\n    def g(self):\n        importlib.import_module('trainer.data')\n"
           "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tensorflow\n")
    found = imported(src, "trainer.results.plots")
    assert {"os", "trainer.results.palette", "trainer.train.loop", "trainer.findings.core",
            "keras.ops", "trainer.data"} <= found
    assert "tensorflow" not in found
    on_import = imported(src, "trainer.results.plots", on_import_only=True)
    assert on_import == {"os", "trainer.results", "trainer.results.palette", "trainer.train",
                         "trainer.train.loop", "typing"}


def test_find_cycle_names_the_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"b"}}) == ["b", "c", "b"]


def test_the_graph_holds_function_level_and_package_edges():
    graph = _graph()
    assert "trainer.launch" in graph["trainer.__main__"]  # inside the worker command's handler
    assert "trainer.data" in graph["trainer.results.baselines"]  # inside baselines_for
    assert "trainer.train.command" in graph["trainer.launch"]  # a worker child runs train
    assert "trainer.data.corpus" in graph["trainer.data"]  # the package's __init__ runs it


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


RESULTS = sorted(m for m in MODULES if m.startswith("trainer.results"))


@pytest.mark.parametrize("module", RESULTS)
def test_results_reach_no_tensorflow_training_or_claims(module):
    """Reading results needs no TensorFlow, Keras, training loop or claim: not at import, not
    inside a function, not through another trainer module."""
    via = reachable(_graph(), module)
    upward = [m for m in via if m.startswith(("trainer.train", "trainer.findings"))]
    assert not upward, f"{module} reaches {_chain(via, upward[0])}"
    heavy = [(m, ext) for m in via for ext in _external(m) if ext.split(".")[0] in HEAVY]
    assert not heavy, f"{heavy[0][1]} imported by {_chain(via, heavy[0][0])}"


def _python(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter whose environment lacks what the command line sets."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND", "MPLBACKEND")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_results_load_no_tensorflow_when_imported():
    """The third-party packages results/ reads with (TensorBoard's event reader, matplotlib)
    do not pull TensorFlow in behind the static walk's back."""
    modules = ", ".join(repr(m) for m in RESULTS)
    proc = _python(f"import importlib, sys\nfor m in [{modules}]: importlib.import_module(m)\n"
                   f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_importing_and_plotting_leave_environment_and_backend_alone(tmp_path):
    """Importing the package, the plots (the LR figure too) and the claim figures, then drawing
    and saving a figure, sets no environment variable and chooses no matplotlib backend: the
    figures are drawn off-screen without one."""
    code = f"""
import os, sys
import matplotlib
before = (dict(os.environ), dict.__getitem__(matplotlib.rcParams, "backend"))
import trainer, trainer.results.plots, trainer.results.lr_plot, trainer.findings.figures
from trainer.atomic import save_figure, subplots
fig, ax = subplots(figsize=(2, 2))
ax.plot([0, 1], [1, 0])
save_figure(fig, {str(tmp_path / "f.png")!r})
after = (dict(os.environ), dict.__getitem__(matplotlib.rcParams, "backend"))
print(before == after, "matplotlib.pyplot" in sys.modules)
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False"]
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("trainer.analysis")))
def test_analyses_import_no_training_code_on_import(module):
    """An analysis restores checkpoints (trainer.train) only inside the function that does it:
    importing one for its ``main`` or its plot needs no training loop."""
    found = imported(MODULES[module].read_text(encoding="utf-8"), module, on_import_only=True)
    bad = sorted(m for m in found if m == "trainer.train" or m.startswith("trainer.train."))
    assert not bad, f"{module} imports {bad} at module level"


def _strings(tree: ast.AST) -> list[str]:
    """Every string constant of ``tree`` except docstrings (they may name files in prose)."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docs]


def file_name_literals(source: str, names) -> list[str]:
    """String literals of ``source`` that are one of ``names`` or a path ending in one."""
    import re

    pattern = re.compile(r"^(?:[\w.-]+/)*(%s)$" % "|".join(re.escape(n) for n in names))
    return [s for s in _strings(ast.parse(source)) if pattern.match(s)]


def test_run_and_results_file_names_live_in_rundir_only():
    """A file of a run or results directory (config.yaml, model.keras, summary.md, runs.csv,
    ...) is named once, in trainer/rundir.py; every other module uses the constant."""
    from trainer import rundir

    names = sorted(v for k, v in vars(rundir).items() if k.isupper() and isinstance(v, str)
                   and "." in v)
    assert {"config.yaml", "model.keras", "summary.md", "runs.csv", "lr_sweep.csv"} <= set(names)
    assert file_name_literals('X = "sweep/summary.md"\nY = "a config.yaml file"', names) == [
        "sweep/summary.md"]
    found = {m: hits for m, p in MODULES.items() if m != "trainer.rundir"
             if (hits := file_name_literals(p.read_text(encoding="utf-8"), names))}
    assert not found, f"file names spelled outside trainer/rundir.py: {found}"


JSON_IO = ("read_json", "write_json")


def test_json_io_has_one_definition_imported_from_atomic():
    """read_json/write_json are defined in trainer/atomic.py and imported from there, under
    their own names: no module re-exports or renames them."""
    bad = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name in JSON_IO and (_resolve(node, module) != "trainer.atomic"
                                              or a.asname not in (None, a.name)):
                        bad.append(f"{module}: from {node.module} import {a.name}")
            elif (isinstance(node, (ast.FunctionDef, ast.Assign)) and module != "trainer.atomic"
                  and {getattr(node, "name", None),
                       *(ast.unparse(t) for t in getattr(node, "targets", []))} & set(JSON_IO)):
                bad.append(f"{module}: defines {ast.unparse(node)[:40]}")
            elif (isinstance(node, ast.Assign) and module != "trainer.atomic"
                  and any(ast.unparse(t) == "__all__" for t in node.targets)
                  and set(JSON_IO) & set(ast.literal_eval(node.value))):
                bad.append(f"{module}: exports {JSON_IO} in __all__")
    assert not bad, bad


def test_the_dtype_policy_is_chosen_in_one_place():
    """The Keras dtype policy of a run is set by trainer.train.strategy.precision only: the
    training loop and the bench call it instead of each writing the policy out."""
    setters = sorted(m for m, p in MODULES.items()
                     if "set_global_policy" in p.read_text(encoding="utf-8")
                     or "mixed_bfloat16" in _strings(ast.parse(p.read_text(encoding="utf-8"))))
    assert setters == ["trainer.train.strategy"], setters


def test_nothing_calls_back_into_the_command_line():
    """``trainer.__main__`` is the top: no module imports it (``python -m trainer.bench`` has
    its own entry, ``trainer.bench.cli.main``, instead of calling the lab's ``main``)."""
    graph = _graph()
    callers = sorted(m for m, edges in graph.items() if "trainer.__main__" in edges)
    assert not callers, callers


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("trainer.analysis")))
def test_analyses_reach_no_claim(module):
    """Analyses sit below the claims: trainer.findings reads them (findings.batch reads
    analysis.padding), so no analysis reaches trainer.findings, not even its thresholds (they
    live in trainer.analysis.thresholds)."""
    via = reachable(_graph(), module)
    upward = [m for m in via if m == "trainer.findings" or m.startswith("trainer.findings.")]
    assert not upward, f"{module} reaches {_chain(via, upward[0])}"


def test_importing_the_trainer_runs_no_tensorflow_op():
    """A sweep worker imports the training code once and forks a child per run
    (trainer/launch.py): a TF op run at import (a module-level ``tf.constant``) starts TF's
    runtime and thread pools in the parent, and every forked child then deadlocks in its first
    op. The eager context must still be unstarted after the worker's imports."""
    done = _python("import trainer.train.loop, trainer.models, trainer.models.decode\n"
                   "from tensorflow.python.eager import context\n"
                   "print(context.context()._context_handle is None)")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
