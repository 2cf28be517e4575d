"""The lab's own size limits (docs/development.md): no module over 350 lines, no function over
60 (methods included), in the package. A split goes along a seam the code
already has."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 350, 60


def oversized(path: Path) -> list[str]:
    """What in ``path`` is over the limits, one entry each ('module: N lines', 'f: N lines')."""
    text = path.read_text()
    found = [f"module: {text.count(chr(10))} lines"] if text.count("\n") > MAX_MODULE_LINES else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{node.name}: {length} lines")
    return found


def test_no_module_or_function_over_the_limits():
    sources = sorted(ROOT.glob("trainer/**/*.py"))
    assert len(sources) > 50 and ROOT / "trainer" / "config.py" in sources
    over = {str(p.relative_to(ROOT)): found for p in sources if (found := oversized(p))}
    assert not over, over


def test_the_check_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n")
    assert oversized(tmp_path / "m.py") == [f"f: {MAX_FUNCTION_LINES + 1} lines"]
