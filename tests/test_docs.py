"""The README stays true to the files it quotes and to the config schema it documents."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import get_type_hints

import pytest
import yaml

from trainer.config import ExperimentConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _quoted_files() -> list[tuple[str, str]]:
    """(path, body) of every README code block whose first line is ``# <a file of the repo>``."""
    out = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```$", README, flags=re.S | re.M):
        first, _, body = block.partition("\n")
        name = first.removeprefix("# ").strip()
        if first.startswith("# ") and (ROOT / name).is_file():
            out.append((name, body))
    return out


def test_readme_blocks_that_quote_a_file_equal_it():
    quoted = _quoted_files()
    assert "configs/sweeps/quick.yaml" in dict(quoted)  # the sweep section shows the spec
    for name, body in quoted:
        assert body == (ROOT / name).read_text(encoding="utf-8"), name


def _schema_defaults(cls=ExperimentConfig, prefix: str = "") -> dict:
    out = {}
    hints = get_type_hints(cls)
    for f in fields(cls):
        if is_dataclass(hints[f.name]):
            out.update(_schema_defaults(hints[f.name], f"{prefix}{f.name}."))
        else:
            value = f.default_factory() if f.default is MISSING else f.default
            out[prefix + f.name] = value
    return out


def _documented_defaults() -> dict:
    """``key -> default`` from the README's "Config keys" table (one key per row)."""
    section = README.split("\n## Config keys\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    out = {}
    for row in rows:
        key, default = (cell.strip().strip("`") for cell in row.split("|")[1:3])
        value = yaml.safe_load(default)
        if isinstance(value, str):  # YAML 1.1 reads 1e-5 as a string; the schema as a float
            try:
                value = float(value)
            except ValueError:
                pass
        out[key] = value
    return out


def test_config_table_documents_every_key_with_its_schema_default():
    documented, schema = _documented_defaults(), _schema_defaults()
    assert sorted(documented) == sorted(schema)  # every key in the table, no key that is not
    for key, value in schema.items():
        doc = documented[key]
        if isinstance(value, Enum):  # a Choice: YAML reads `true` as a bool, the schema a name
            assert str(doc).lower() == value.value, key
        elif isinstance(value, float):
            assert isinstance(doc, float) and doc == pytest.approx(value, rel=1e-12), key
        else:
            assert doc == value and type(doc) is type(value), key


def test_ci_runs_the_readme_test_command_and_the_slow_tier_it_leaves_out():
    """The README's second set-up command is what `.ci/run` runs, and the `slow` tier it
    deselects runs there too (so no test goes unrun in CI)."""
    setup = re.search(r"^```bash\n(.*?)^```$", README, flags=re.S | re.M).group(1).splitlines()
    assert len(setup) == 2, "the README starts with exactly two set-up commands"
    test_cmd = setup[1].split("&&")[-1].strip()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_cmd in ci
    if '-m "not slow"' in test_cmd:
        assert test_cmd.replace('-m "not slow"', "-m slow") in ci


def test_every_reference_part_named_in_code_is_one_the_script_takes():
    """A "not run yet" line tells the user which `scripts/reference.sh` parts make the missing
    runs; each name it gives must be a part of the script's own usage line."""
    script = (ROOT / "scripts" / "reference.sh").read_text(encoding="utf-8")
    usage = re.search(r"^#\s+PART:(.*\n(?:#\s{4,}.*\n)*)", script, flags=re.M).group(1)
    parts = set(usage.replace("#", " ").split())
    named = [(path.name, p) for path in (ROOT / "trainer").rglob("*.py")
             for cmd in re.findall(r"scripts/reference\.sh((?: [a-z_0-9]+)+)",
                                   path.read_text(encoding="utf-8"))
             for p in cmd.split()]
    assert named, "no `scripts/reference.sh PART` in trainer/: this test reads nothing"
    assert [n for n in named if n[1] not in parts] == []


PACKAGES = sorted(p.parent.name for p in (ROOT / "trainer").glob("*/__init__.py"))


def _modules(package: str) -> set[str]:
    """The package's files, as module names (``__init__`` left out)."""
    return {p.stem for p in (ROOT / "trainer" / package).glob("*.py") if p.stem != "__init__"}


def _map_entry(package: str) -> str:
    """The README "Development" module map's entry for ``trainer/PACKAGE/`` (to the next entry)."""
    block = README.split("## Development", 1)[1].split("```", 2)[1]
    entry = re.search(rf"^trainer/{package}/ (.*?)(?=^\S)", block, flags=re.S | re.M)
    assert entry, f"the Development module map has no trainer/{package}/ entry"
    return entry.group(1)


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_docstring_names_exactly_its_files(package):
    """Every ``name`` in the docstring of ``trainer/PACKAGE/__init__.py`` that could be a module
    (a lowercase identifier) is one of the package's files, and every file is named: adding a
    file without saying what it holds fails here."""
    import ast

    doc = ast.get_docstring(ast.parse((ROOT / "trainer" / package / "__init__.py").read_text()))
    named = set(re.findall(r"``([a-z_][a-z0-9_]*)``", doc or ""))
    assert named == _modules(package), (f"named, no such file: {sorted(named - _modules(package))}"
                                        f"; not named: {sorted(_modules(package) - named)}")


@pytest.mark.parametrize("package", PACKAGES)
def test_the_development_map_names_every_file_of_a_package(package):
    """The README's module map names each file of the package in its ``trainer/PACKAGE/`` entry
    (a word of its own; an analysis by its command name, ``grad-profile`` for grad_profile)."""
    entry = _map_entry(package)
    missing = sorted(m for m in _modules(package)
                     if not re.search(rf"(?<![\w-]){m.replace('_', '[_-]')}(?![\w-])", entry))
    assert not missing, f"trainer/{package}/ in README's Development map omits {missing}"


def test_the_module_map_check_fails_on_an_unnamed_file(monkeypatch):
    monkeypatch.setattr(f"{__name__}._modules", lambda package: {"step", "loop", "no_such_file"})
    with pytest.raises(AssertionError, match="no_such_file"):
        test_the_development_map_names_every_file_of_a_package("train")
    with pytest.raises(AssertionError, match="no_such_file"):
        test_a_package_docstring_names_exactly_its_files("train")
