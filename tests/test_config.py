"""Config: strict schema, YAML diffs, dotted overrides, one-line errors, CLI exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from trainer.config import (CHOICES, ConfigError, ExperimentConfig, Norm, load_config,
                            network_key, to_dict, to_yaml, validate)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("override,key,hint", [  # the hint is the full key, as one types it
    ("model.nrom=batch", "model.nrom", "model.norm"),
    ("train.stpes=5", "train.stpes", "train.steps"),
    ("modle.norm=layer", "modle", "model"),
    ("data.vocab=100", "data.vocab", "data.vocab_size"),
])
def test_unknown_key_names_key_and_closest(override, key, hint):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    msg = str(e.value)
    assert "\n" not in msg and f"'{key}'" in msg and f"did you mean '{hint}'?" in msg


def test_unknown_key_without_a_close_one_lists_full_keys():
    with pytest.raises(ConfigError, match=r"valid keys: model\.norm, model\.placement, "):
        load_config(None, ["model.zzz=1"])


@pytest.mark.parametrize("override,key", [("train.steps=abc", "train.steps"),
                                          ("model.dim=1.5", "model.dim"),
                                          ("runtime.xla=maybe", "runtime.xla")])
def test_wrong_type(override, key):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        load_config(None, [override])


def test_unknown_norm_lists_valid_names():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["model.norm=btach"])
    assert all(name.value in str(e.value) for name in Norm) and "'batch'" in str(e.value)


@pytest.mark.parametrize("overrides,fragment", [
    (["model.residual=rezero", "model.placement=post"], "rezero"),
    (["model.dim=100", "model.num_heads=3"], "divisible"),
    (["data.buckets=[32,16]", "data.max_len=32"], "increasing"),
    (["data.buckets=[16,32]"], "max_len"),
    (["data.source=files"], "data.files"),
    (["data.source=hub"], "data.name"),
    (["data.source=hub", "data.name=wikitext", "data.corpus=python"], "data.corpus=python needs"),
    (["train.warmup_steps=500", "train.steps=100"], "warmup"),
    (["data.vocab_size=10"], "vocab_size"),
    (["model.placement=middle"], "placement"),
    (["model.residual=maybe"], "residual"),
    (["train.steps"], "key.path=value"),
    (["model.dyt_alpha_attention=0.8"], "dyt_alpha_attention means nothing with model.norm=layer"),
    (["model.norm=rms", "model.dyt_alpha_final=0.2"], "means nothing with model.norm=rms"),
    (["model.norm=dyt", "model.placement=post", "model.dyt_alpha_final=0.2"], "no final norm"),
    (["model.norm=dyt", "model.dyt_alpha_ffn=0"], "dyt_alpha_ffn must be > 0"),
    (["model.embed_scale=0"], "embed_scale must be > 0"),
    (["model.embed_scale=-8"], "embed_scale must be > 0"),
])
def test_impossible_values_rejected(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_config(None, overrides)


@pytest.mark.parametrize("value,expected", [("true", "true"), ("false", "false"),
                                            ("True", "true"), ("rezero", "rezero")])
def test_residual_accepts_yaml_booleans(value, expected):
    assert load_config(None, [f"model.residual={value}"]).model.residual == expected


def test_yaml_diff_base_chain_and_override_order(tmp_path):
    (tmp_path / "a.yaml").write_text("model:\n  norm: batch\n  dim: 64\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nmodel:\n  dim: 96\n  num_heads: 3\n")
    cfg = load_config(tmp_path / "b.yaml", ["model.num_layers=3"])
    assert (cfg.model.norm, cfg.model.dim, cfg.model.num_heads, cfg.model.num_layers) == \
        ("batch", 96, 3, 3)
    # the resolved config round-trips through YAML to the same values
    (tmp_path / "resolved.yaml").write_text(to_yaml(cfg))
    assert load_config(tmp_path / "resolved.yaml") == cfg


def test_yaml_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  nrom: batch\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml.*'model\.nrom'.*'model\.norm'"):
        load_config(bad)
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_yaml_is_safe(tmp_path):
    """A config whose YAML would run a command if it were loaded unsafely: the command writes
    a marker file. Loading it is the one-line config error, and the marker never appears."""
    import yaml

    def payload(marker):
        return f"model:\n  norm: !!python/object/apply:os.system ['touch {marker}']\n"

    control = tmp_path / "CONTROL"
    yaml.unsafe_load(payload(control))  # the payload does what it says when loaded unsafely
    assert control.exists()
    marker, evil = tmp_path / "MARKER", tmp_path / "evil.yaml"
    evil.write_text(payload(marker))
    with pytest.raises(ConfigError) as e:
        load_config(evil)
    assert not marker.exists()
    assert "\n" not in str(e.value) and str(evil) in str(e.value), str(e.value)


def test_every_shipped_config_loads():
    for path in (ROOT / "configs").rglob("*.yaml"):
        if "sweeps" not in path.parts:
            load_config(path)


def test_config_is_read_only():
    from omegaconf.errors import ReadonlyConfigError

    cfg = load_config(None)
    with pytest.raises(ReadonlyConfigError, match="read-only") as e:
        cfg.model.norm = "batch"
    assert e.value.full_key == "model.norm"
    assert cfg.model.norm == "layer"


@pytest.mark.parametrize("args,fragment", [
    (["train", "model.nrom=batch"], "did you mean 'model.norm'?"),
    (["train", "model.norm=foo"], "valid: layer"),
    (["train", "--config", "configs/nope.yaml"], "not found"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    workdir, xla_cache = tmp_path / "run", tmp_path / "xla"
    proc = subprocess.run([sys.executable, "-m", "trainer", *args, "--workdir", str(workdir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NORMLAB_XLA_CACHE": str(xla_cache)})
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0], proc.stderr
    assert not workdir.exists()  # nothing half-written that looks like a result
    assert not xla_cache.exists()  # the config is read before the compilation cache is opened


# ---------------------------------------------------------------- enum fields (Choice)

# what a value needs to be a valid config (the other fields keep their defaults)
NEEDS = {("data.source", "files"): ["data.files=corpus.txt"],
         ("data.source", "hub"): ["data.name=wikitext"],
         ("model.residual", "deepnorm"): ["model.placement=post"]}
MEMBERS = [(key, member) for key, choice in CHOICES.items() for member in choice]


def test_every_enum_field_is_a_choice():
    schema = OmegaConf.structured(ExperimentConfig)
    # model.norm is a plain string: a lab norm (a Norm member) or a norm from outside the lab
    # (tests/test_plugin.py)
    str_fields = {k for k in ("model.placement", "model.residual", "model.qk_norm",
                              "model.init", "data.source",
                              "data.corpus", "data.format", "runtime.strategy", "train.decay")}
    assert set(CHOICES) == str_fields
    for key, choice in CHOICES.items():
        assert isinstance(OmegaConf.select(schema, key), choice)
        assert all(m.name == m.value == str(m) == f"{m}" for m in choice)


@pytest.mark.parametrize("key,member", MEMBERS, ids=[f"{k}={m.value}" for k, m in MEMBERS])
def test_every_member_loads_and_round_trips(tmp_path, key, member):
    overrides = [f"{key}={member.value}", *NEEDS.get((key, member.value), [])]
    cfg = load_config(None, overrides)
    value = OmegaConf.select(cfg, key)
    if not (key == "data.format" and member.value == "auto"):  # auto is resolved on load
        assert value is member and value == member.value and hash(value) == hash(member.value)
    # serialised as the plain string, never "Norm.layer"
    plain = to_dict(cfg)
    for part in key.split("."):
        plain = plain[part]
    assert type(plain) is str and plain == value.value
    saved = yaml.safe_load(to_yaml(cfg))
    assert saved[key.split(".")[0]][key.split(".")[1]] == value.value
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    assert load_config(tmp_path / "config.yaml") == cfg


@pytest.mark.parametrize("key", list(CHOICES))
@pytest.mark.parametrize("via", ["override", "yaml"])
def test_bad_choice_names_key_value_and_valid_ones(tmp_path, key, via):
    section, leaf = key.split(".")
    bad = f"no_such_{leaf}"
    with pytest.raises(ConfigError) as e:
        if via == "override":
            load_config(None, [f"{key}={bad}"])
        else:
            (tmp_path / "c.yaml").write_text(yaml.safe_dump({section: {leaf: bad}}))
            load_config(tmp_path / "c.yaml")
    msg = str(e.value)
    assert "\n" not in msg and key in msg and f"'{bad}'" in msg
    assert all(m.value in msg.split("valid:")[-1] for m in CHOICES[key])


@pytest.mark.parametrize("key,member", MEMBERS, ids=[f"{k}={m.value}" for k, m in MEMBERS])
def test_validate_changes_nothing(key, member):
    cfg = OmegaConf.structured(ExperimentConfig)
    OmegaConf.update(cfg, key, member)
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(NEEDS.get((key, member.value), [])))
    before = OmegaConf.to_yaml(cfg)
    validate(cfg)
    assert OmegaConf.to_yaml(cfg) == before
    assert OmegaConf.select(cfg, key) == member  # not even data.format=auto is resolved


# Committed runs: the current reference and the archived one (made by older code, still readable).
SAVED = sorted((ROOT / "results").glob("**/config.yaml"))


@pytest.mark.parametrize("path", SAVED[::8], ids=lambda p: str(p.parent.relative_to(ROOT / "results")))
def test_saved_run_configs_load_unchanged(path):
    # reproduce reads these: every saved value loads back as itself (keys added to the schema
    # since a run was made take their defaults)
    saved, loaded = OmegaConf.load(path), OmegaConf.create(to_yaml(load_config(path)))
    assert OmegaConf.merge(loaded, saved) == loaded


def test_a_registry_must_cover_its_choice_exactly():
    full = {m: m.value for m in Norm}
    assert Norm.require_keys(full, "the registry") is full
    for broken in ({m: 1 for m in Norm if m != Norm.masked_batch}, {**full, "group": 1}):
        with pytest.raises(ImportError, match="Norm and the registry differ"):
            Norm.require_keys(broken, "the registry")


def test_the_choices_docstring_says_which_vocabularies_are_checked_at_import():
    """trainer/choices.py names, as checked, exactly the vocabularies whose registry calls
    ``require_keys`` somewhere in the package, and names every other one as unchecked (it once
    said every vocabulary was checked; Init and Decay are not)."""
    import re
    from pathlib import Path

    from trainer import choices

    package = Path(choices.__file__).parent
    checked = {m for p in package.rglob("*.py")
               for m in re.findall(r"\b([A-Z]\w*)\.require_keys\(", p.read_text(encoding="utf-8"))}
    vocabularies = {name for name, v in vars(choices).items() if isinstance(v, type)
                    and issubclass(v, choices.Choice) and v is not choices.Choice}
    said_checked, _, rest = choices.__doc__.partition("are the key sets of registries")
    said_checked = set(re.findall(r"``(\w+)``", said_checked.rsplit("\n\n", 1)[-1]))
    unchecked_part = rest.split("nothing checks at import", 1)[-1]
    said_unchecked = set(re.findall(r"``([A-Z]\w*)``", unchecked_part))
    assert checked and said_checked == checked, (said_checked, checked)
    assert said_unchecked == vocabularies - checked, (said_unchecked, vocabularies - checked)


def test_network_key_reads_a_per_location_alpha_equal_to_dyt_alpha_as_null():
    dyt = ["model.norm=dyt", "model.dyt_alpha=0.5"]
    key = network_key(load_config(None, dyt))
    assert network_key(load_config(None, [*dyt, "model.dyt_alpha_ffn=0.5"])) == key
    assert network_key(load_config(None, [*dyt, "model.dyt_alpha_ffn=0.2"])) != key
    assert network_key(load_config(None, [*dyt, "model.embed_scale=8"])) != key
    # the DyT recipe is accepted with any placement where each key means something
    load_config(None, [*dyt, "model.placement=post", "model.dyt_alpha_attention=0.8",
                       "model.dyt_alpha_ffn=0.2", "model.embed_scale=35.36"])
