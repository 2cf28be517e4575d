"""Norms from outside the lab: ``model.norm=PATH.py:ClassName`` or ``package.module:ClassName``.

The norm contract (what every lab norm honours, ``trainer/models/norms.py``): a Keras layer
class, called as ``norm(x, padding_mask=mask, training=training)`` with ``x`` (B, T, C) and
``mask`` (B, T) (1 = real token, 0 = pad), returning (B, T, C) in float32, with a
``get_config`` that ``from_config`` rebuilds it from. Its constructor may take ``epsilon``,
``momentum`` and ``affine`` (``model.norm_epsilon``, ``model.bn_momentum``,
``model.norm_affine``): each is passed when the constructor names it.

``check`` tests a spec against the contract before anything is trained or written: a missing
file, module or class, a class that is not a layer, a ``call`` without ``padding_mask`` and
``training``, a changed output shape or dtype, NaN at init or a broken config round trip is one
``ConfigError`` line (exit 2).

A run records its norm: ``keep_copy`` copies the file that defines the class into
``RUN_DIR/norm/`` with its SHA-256 (``RUN_DIR/norm/source.json``), and ``use_run_norm`` makes
that copy the class of the spec in this process. Resume, ``reproduce``, ``generate``, the
analyses and ``keras.saving.load_model`` (after ``use_run_norm``) therefore read the norm the
run was trained with, even when the original file has changed or is gone. The norm's module
must be one self-contained file (no relative imports).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import shutil
import sys
from pathlib import Path

import keras
import numpy as np

from trainer import rundir
from trainer.atomic import read_json, write_json
from trainer.config import ConfigError
from trainer.norm_names import plugin_target

# What the lab passes a norm's constructor, when the constructor names the argument.
CONSTRUCTOR_ARGS = ("epsilon", "momentum", "affine")

_LOADED: dict[str, type] = {}  # spec -> class, for this process (a run's copy once used)


def _error(spec: str, message: str) -> ConfigError:
    """One line, whatever the user's exception printed (Keras' messages span several)."""
    return ConfigError(f"model.norm '{spec}': " + " ".join(message.split()))


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _import_file(spec: str, path: Path):
    """The module defined by the file ``path``, under a name unique to its content."""
    path = Path(path)
    if not path.is_file():
        raise _error(spec, f"file '{path}' not found")
    name = f"normlab_norm_{path.stem}_{_sha256(path)[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as e:  # the user's file: any error is theirs, reported in one line
        del sys.modules[name]
        raise _error(spec, f"importing {path} failed: {type(e).__name__}: {e}") from None
    return module


def _import_module(spec: str, name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        raise _error(spec, f"cannot import module '{name}': {e}") from None
    except Exception as e:
        raise _error(spec, f"importing module '{name}' failed: {type(e).__name__}: {e}") from None


def load_class(spec: str, source: Path | None = None) -> type:
    """The layer class ``spec`` names: from ``source`` (a file, e.g. a run's copy) when given,
    else from the spec's file or module; the same class for the rest of the process."""
    spec = str(spec)
    if source is None and spec in _LOADED:
        return _LOADED[spec]
    found = plugin_target(spec)
    if found is None:
        raise _error(spec, "not FILE.py:Class or package.module:Class")
    kind, target, cls_name = found
    module = (_import_file(spec, source or Path(target)) if source or kind == "file"
              else _import_module(spec, target))
    cls = getattr(module, cls_name, None)
    if cls is None:
        classes = sorted(n for n, v in vars(module).items() if inspect.isclass(v)
                         and v.__module__ == module.__name__)
        raise _error(spec, f"no class '{cls_name}' there (classes: {', '.join(classes) or 'none'})")
    if not (inspect.isclass(cls) and issubclass(cls, keras.layers.Layer)):
        raise _error(spec, f"'{cls_name}' is not a keras.layers.Layer subclass")
    _LOADED[spec] = cls
    return cls


def source_file(spec: str) -> Path:
    """The file that defines the class of ``spec`` (what a run keeps a copy of)."""
    cls = load_class(spec)
    path = inspect.getsourcefile(cls)
    if path is None:
        raise _error(spec, "its class has no source file to keep with the run")
    return Path(path)


def constructor_kwargs(cls: type, **available) -> dict:
    """The ``available`` arguments (``CONSTRUCTOR_ARGS``) that ``cls.__init__`` names."""
    params = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in available.items() if k in params and k in CONSTRUCTOR_ARGS}


def build(spec: str, name: str, **available) -> keras.layers.Layer:
    """An instance of the norm ``spec`` names, called ``name``, given the ``available``
    constructor arguments it names."""
    cls = load_class(spec)
    try:
        return cls(**constructor_kwargs(cls, **available), name=name)
    except Exception as e:
        raise _error(spec, f"constructing it failed: {type(e).__name__}: {e}") from None


def _call_accepts(cls: type) -> bool:
    params = inspect.signature(cls.call).parameters
    var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
    return var_kw or {"padding_mask", "training"} <= set(params)


def check(spec: str, dim: int, **available) -> None:
    """Test ``spec`` against the norm contract (module docstring) on a (2, 8, ``dim``) input
    with pads, in training and inference mode; a ``ConfigError`` line for the first breach."""
    cls = load_class(spec)
    if not _call_accepts(cls):
        raise _error(spec, f"{cls.__name__}.call must accept (x, padding_mask=None, "
                           f"training=None); it takes {inspect.signature(cls.call)}")
    layer = build(spec, "norm_check", **available)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 8, dim)).astype("float32")
    mask = np.ones((2, 8), "float32")
    mask[1, 5:] = 0.0
    for training in (True, False):
        try:
            y = layer(x, padding_mask=mask, training=training)
        except Exception as e:
            raise _error(spec, f"calling it (training={training}) failed: "
                               f"{type(e).__name__}: {e}") from None
        if tuple(y.shape) != x.shape:
            raise _error(spec, f"its output shape {tuple(y.shape)} differs from its input's "
                               f"{x.shape}")
        if keras.backend.standardize_dtype(y.dtype) != "float32":
            raise _error(spec, f"it returns {y.dtype}, not float32")
        if not np.all(np.isfinite(np.asarray(y))):
            raise _error(spec, f"NaN or Inf in its output at init (training={training})")
    try:
        cls.from_config(layer.get_config())
    except Exception as e:
        raise _error(spec, f"get_config/from_config round trip failed: {type(e).__name__}: "
                           f"{e}") from None


def keep_copy(spec: str, run_dir: Path) -> Path:
    """Copy the file defining ``spec``'s class into ``RUN_DIR/norm/`` (with its SHA-256 in
    ``source.json``), unless the run already holds one; returns the copy."""
    folder = Path(run_dir) / rundir.NORM_DIR
    held = run_copy(run_dir)
    if held is not None:
        return held
    source = source_file(spec)
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / source.name
    shutil.copyfile(source, copy)
    write_json(folder / rundir.NORM_SOURCE, {"spec": spec, "source": str(source),
                                             "file": copy.name, "sha256": _sha256(copy)})
    return copy


def run_copy(run_dir: Path) -> Path | None:
    """The norm file a run keeps (``keep_copy``), checked against its recorded SHA-256; None
    when the run has none (a lab norm)."""
    folder = Path(run_dir) / rundir.NORM_DIR
    record = folder / rundir.NORM_SOURCE
    if not record.is_file():
        return None
    meta = read_json(record)
    copy = folder / meta["file"]
    if not copy.is_file() or _sha256(copy) != meta["sha256"]:
        raise ConfigError(f"{copy} is missing or differs from the norm the run was trained with "
                          f"(sha256 {meta['sha256'][:12]}…)")
    return copy


def use_run_norm(run_dir: Path, spec: str | None = None) -> str | None:
    """Make the norm ``RUN_DIR/norm/`` keeps the class of its spec in this process (before a
    model of the run is built or loaded with ``keras.saving.load_model``); returns the spec,
    or None when the run uses a lab norm."""
    copy = run_copy(run_dir)
    if copy is None:
        return None
    spec = spec or read_json(Path(run_dir) / rundir.NORM_DIR / rundir.NORM_SOURCE)["spec"]
    load_class(spec, source=copy)
    return spec


def seed_copy(from_run: Path, to_run: Path) -> None:
    """Give ``to_run`` (a rerun of ``from_run``) the norm file ``from_run`` was trained with."""
    if run_copy(from_run) is not None and run_copy(to_run) is None:
        shutil.copytree(Path(from_run) / rundir.NORM_DIR, Path(to_run) / rundir.NORM_DIR,
                        dirs_exist_ok=True)


def is_plugin(spec) -> bool:
    """Whether ``model.norm`` names a norm from outside the lab (a lab norm's name has no
    ``:``, so it never reads as one)."""
    return plugin_target(str(spec)) is not None


def prepare_run(model_cfg, run_dir: Path) -> None:
    """Before a run trains (nothing written yet): a norm from outside the lab is resolved (the
    run's own copy when it has one: a resume or a reproduction) and checked (``check``)."""
    spec = str(model_cfg.norm)
    if not is_plugin(spec):
        return
    use_run_norm(run_dir, spec)
    check(spec, model_cfg.dim, epsilon=model_cfg.norm_epsilon, momentum=model_cfg.bn_momentum,
          affine=bool(model_cfg.norm_affine))
