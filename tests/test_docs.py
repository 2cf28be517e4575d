"""The README and the reference pages under docs/ stay true to the files they quote, the config
schema, the command line and each other (every relative link resolves)."""

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
README_MAX_LINES = 250  # a README a newcomer reads to the end; reference material goes to docs/
# Every page of the documentation: the README and the reference pages it links.
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
         for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```$", flags=re.S | re.M)


def _page(name: str) -> str:
    return PAGES[name]


def _headings(text: str) -> list[tuple[int, str, int]]:
    """(level, title, line index) of every Markdown heading outside code blocks."""
    out, fenced = [], False
    for i, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"(#{1,6}) (.*)", line)):
            out.append((len(m.group(1)), m.group(2).strip(), i))
    return out


def _section(text: str, heading: str) -> str:
    """The body of ``heading`` (a whole heading line, e.g. ``## Keys``) up to the next heading
    of the same or a higher level."""
    level, title = len(heading.split(" ", 1)[0]), heading.split(" ", 1)[1]
    heads, lines = _headings(text), text.splitlines()
    start = next(i for lv, t, i in heads if (lv, t) == (level, title))
    end = next((i for lv, _, i in heads if i > start and lv <= level), len(lines))
    return "\n".join(lines[start + 1:end]) + "\n"


def _quoted_files() -> list[tuple[str, str, str]]:
    """(page, path, body) of every code block of the docs whose first line is
    ``# <a file of the repo>``."""
    out = []
    for page, text in PAGES.items():
        for block in FENCE.findall(text):
            first, _, body = block.partition("\n")
            name = first.removeprefix("# ").strip()
            if first.startswith("# ") and (ROOT / name).is_file():
                out.append((page, name, body))
    return out


def test_doc_blocks_that_quote_a_file_equal_it():
    quoted = _quoted_files()
    assert ("docs/cli.md", "configs/sweeps/quick.yaml") in {(p, n) for p, n, _ in quoted}
    for page, name, body in quoted:
        assert body == (ROOT / name).read_text(encoding="utf-8"), f"{page} quotes {name}"


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
    """``key -> default`` from the table of docs/config.md (one key per row)."""
    section = _section(_page("docs/config.md"), "## Keys")
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
    assert README.splitlines()[2] == "```bash", "the README starts with its set-up commands"
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


def _norm_lists() -> dict[str, set[str]]:
    """Every list of the lab's norms in the docs, by where it is: the names in backticks."""
    def names(span: str) -> set[str]:
        return set(re.findall(r"`(\w+)`", span))

    variants = _section(README, "## The variants")
    row = next(line for line in _page("docs/config.md").splitlines()
               if line.startswith("| `model.norm` |"))
    return {
        "README: What this lab is": names(re.search(
            r"normalization \(([^)]*)\)", _section(README, "## What this lab is")).group(1)),
        "README: the variants table": {m for m in re.findall(r"^\| `(\w+)` \|", variants, re.M)},
        "README: Evaluate your own normalization": names(re.search(
            r"the lab's names \(([^)]*)\)",
            _section(README, "## Evaluate your own normalization")).group(1)),
        "docs/config.md: model.norm": names(row.partition(", or")[0]),  # default, then values
    }


def test_every_list_of_the_norms_in_the_docs_is_the_registry():
    from trainer.norm_names import NORM_TABLE  # the vocabulary the registry must equal

    lists = _norm_lists()
    assert all(lists.values()), "a norm list was not found: has its sentence changed?"
    wrong = {where: f"missing {sorted(set(NORM_TABLE) - found)}, "
                    f"not in the registry {sorted(found - set(NORM_TABLE))}"
             for where, found in lists.items() if found != set(NORM_TABLE)}
    assert wrong == {}


def _slug(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    title = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", title)  # inline code, emphasis, link targets
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, title, _ in _headings(text):
        slug = _slug(title)
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out


def _links(text: str) -> list[str]:
    """Targets of the Markdown links and images of ``text``, code blocks and spans left out."""
    prose = re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))
    return re.findall(r"\]\(([^)\s]+)\)", prose)


def test_every_relative_link_points_at_a_file_and_heading_that_exist():
    checked, broken = 0, []
    for page, text in PAGES.items():
        for target in _links(text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check
                continue
            path, _, anchor = target.partition("#")
            file = (ROOT / page).parent / path if path else ROOT / page
            checked += 1
            if not file.exists():
                broken.append(f"{page}: {target} (no such file)")
            elif anchor and anchor not in _anchors(file.read_text(encoding="utf-8")):
                broken.append(f"{page}: {target} (no heading #{anchor} in {path or page})")
    assert checked > 30, "the link check read almost nothing: has the link syntax changed?"
    assert broken == []


def test_the_link_check_catches_a_broken_link():
    text = "# Title\n\n## A section's name\n\n```\n# not a heading\n```\n"
    assert _anchors(text) == {"title", "a-sections-name"}
    assert _links("[a](b.md#c) `[x](y)` ![i](p.png)\n```\n[z](w)\n```\n") == ["b.md#c", "p.png"]
    assert _slug("Where a sweep's time goes") == "where-a-sweeps-time-goes"
    assert _slug("`train`: one run") == "train-one-run"


def test_readme_is_short_and_links_every_docs_page():
    lines = README.count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference to docs/"
    linked = {Path(target.partition("#")[0]).as_posix() for target in _links(README)}
    assert sorted(p for p in PAGES if p.startswith("docs/") and p not in linked) == []


def test_cli_page_documents_every_command_and_option():
    """docs/cli.md has a ``## NAME`` section per subcommand, naming each of its options; bench's
    actions and the analyses (their own parsers) are read the same way."""
    import argparse

    from trainer.__main__ import parser
    from trainer.analysis import ANALYSES
    from trainer.bench.cli import _PARSERS as BENCH_PARSERS

    cli = _page("docs/cli.md")
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = {name: p for name, p in sub.choices.items()}
    missing = []
    for name, p in options.items():
        if f"\n## {name}\n" not in cli:
            missing.append(f"## {name}")
            continue
        section = _section(cli, f"## {name}")
        missing += [f"{name} {o}" for a in p._actions for o in a.option_strings
                    if o.startswith("--") and o != "--help" and o not in section]
    bench = _section(cli, "## bench")
    missing += [f"bench {action} {o}" for action, make in BENCH_PARSERS.items()
                for a in make()._actions for o in a.option_strings
                if o.startswith("--") and o != "--help" and o not in bench]
    analyze = _section(cli, "## analyze")
    for kind, module in ANALYSES.items():
        source = (ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8")
        flags = re.findall(r"(?:option|add_argument)\(\s*\"(--[a-z-]+)\"", source) + ["--out"]
        if f"analyze {kind} " not in analyze:
            missing.append(f"analyze {kind}")
        missing += [f"analyze {kind} {f}" for f in flags if f not in analyze]
    assert missing == []


PACKAGES = sorted(p.parent.name for p in (ROOT / "trainer").glob("*/__init__.py"))


def _modules(package: str) -> set[str]:
    """The package's files, as module names (``__init__`` left out)."""
    return {p.stem for p in (ROOT / "trainer" / package).glob("*.py") if p.stem != "__init__"}


def _map_entry(package: str) -> str:
    """docs/development.md's module map entry for ``trainer/PACKAGE/`` (to the next entry)."""
    block = _page("docs/development.md").split("## Module map", 1)[1].split("```", 2)[1]
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
    """docs/development.md's module map names each file of the package in its ``trainer/PACKAGE/`` entry
    (a word of its own; an analysis by its command name, ``grad-profile`` for grad_profile)."""
    entry = _map_entry(package)
    missing = sorted(m for m in _modules(package)
                     if not re.search(rf"(?<![\w-]){m.replace('_', '[_-]')}(?![\w-])", entry))
    assert not missing, f"trainer/{package}/ in docs/development.md's module map omits {missing}"


def test_the_module_map_check_fails_on_an_unnamed_file(monkeypatch):
    monkeypatch.setattr(f"{__name__}._modules", lambda package: {"step", "loop", "no_such_file"})
    with pytest.raises(AssertionError, match="no_such_file"):
        test_the_development_map_names_every_file_of_a_package("train")
    with pytest.raises(AssertionError, match="no_such_file"):
        test_a_package_docstring_names_exactly_its_files("train")
