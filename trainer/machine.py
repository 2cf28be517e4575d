"""What decides bit-identity of a CPU run besides the code: the processor, its instruction sets,
thread counts and the kernels TensorFlow picks for them.

Two runs of the same code and packages agree bit for bit only when these agree too: oneDNN and
XLA choose kernels (vector width, FMA or not, blocking) from the instruction sets, and the number
of threads decides how reductions are split. ``trainer.results.compare`` compares these records
(its ``IDENTITY_KEYS``) to decide between demanding identity and allowing a float32 tolerance.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import resource
import subprocess
import sys
from importlib import metadata

import psutil

# Packages whose versions a run directory (meta.json) and a benchmark report record.
PACKAGES = ("tensorflow", "keras", "tensorboard", "datasets", "tokenizers", "gensim", "omegaconf",
            "numpy")

# Instruction sets that change which kernels oneDNN/XLA/Eigen generate (and so the rounding).
_ISA = re.compile(r"^(avx|avx2|fma|avx512.*|avx_vnni|amx.*)$")


def _cpuinfo() -> tuple[str | None, list[str], int | None]:
    """CPU model, relevant flags and physical core count from /proc/cpuinfo (Linux only)."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8", errors="replace").read()
    except OSError:
        return None, [], None
    model, flags, cores = None, set(), set()
    for block in text.split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        model = model or fields.get("model name")
        flags |= {f for f in fields.get("flags", "").split() if _ISA.match(f)}
        if "core id" in fields:
            cores.add((fields.get("physical id"), fields["core id"]))
    return model, sorted(flags), len(cores) or None


def visible_accelerators() -> list[str]:
    """The accelerators this process will see, named as ``machine_identity`` names them
    (``GPU: NVIDIA H200 (compute capability 9.0)``), found without starting TensorFlow (the
    compilation cache needs them before XLA's flags are read). NVIDIA GPUs through
    ``nvidia-smi`` under ``CUDA_VISIBLE_DEVICES``; TPUs as far as the host names them
    (``TPU_ACCELERATOR_TYPE``, else the count of ``/dev/accel*`` chips). [] on a CPU machine."""
    found = _nvidia_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"))
    tpu = os.environ.get("TPU_ACCELERATOR_TYPE")
    chips = glob.glob("/dev/accel[0-9]*")
    if tpu or chips:
        found.append(f"TPU: {tpu or f'{len(chips)} chips of unknown type'}")
    return found


def _nvidia_gpus(visible: str | None) -> list[str]:
    if visible is not None and visible.strip() in ("", "-1"):  # CUDA hides every GPU
        return []
    # compute_cap is a field of recent drivers only: without it, the names alone.
    for fields in ("index,uuid,name,compute_cap", "index,uuid,name"):
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):  # no NVIDIA driver
            return []
        if out.returncode == 0:
            return parse_nvidia_smi(out.stdout, visible)
    return []


def parse_nvidia_smi(text: str, visible: str | None = None) -> list[str]:
    """GPU names from ``nvidia-smi --query-gpu=index,uuid,name[,compute_cap]`` CSV rows, those
    ``visible`` (``CUDA_VISIBLE_DEVICES``: indices or UUID prefixes) lists, in its order. A
    list naming no row (MIG devices) keeps every GPU: a key naming more never names less."""
    rows = [[f.strip() for f in line.split(",")] for line in text.splitlines() if line.strip()]
    if visible:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        chosen = [r for w in wanted for r in rows if w == r[0] or (len(w) > 4 and
                                                                   r[1].startswith(w))]
        rows = chosen or rows
    return [f"GPU: {r[2]}" + (f" (compute capability {r[3]})" if len(r) > 3 else "")
            for r in rows]


def _onednn_enabled() -> bool | None:
    """Whether TensorFlow's oneDNN kernels are on: TF_ENABLE_ONEDNN_OPTS if set, else TF's default
    for this build and platform, as TF itself resolves it."""
    try:
        from tensorflow.python.util import _pywrap_util_port  # no public API for this
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return None


def machine_identity() -> dict:
    """The machine a run ran on, as far as it decides the floating-point results (for meta.json).

    Thread counts are TensorFlow's settings; 0 means TF's default (one per usable core).
    """
    import tensorflow as tf

    model, flags, physical = _cpuinfo()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpu_model": model or platform.processor() or platform.machine(),
        "cpu_flags": flags,
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": physical or psutil.cpu_count(logical=False),
        "usable_cores": usable,
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "onednn_env": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        "onednn_enabled": _onednn_enabled(),
        "tensorflow": tf.__version__,
        # XLA ships inside TensorFlow: its version is TF's source revision.
        "xla": tf.version.GIT_VERSION,
        "accelerators": [_accelerator(tf, d) for d in tf.config.list_physical_devices()
                         if d.device_type != "CPU"],
    }


def _accelerator(tf, device) -> str:
    """``GPU: NVIDIA H200 (compute capability 9.0)``-style name of one accelerator."""
    details = tf.config.experimental.get_device_details(device)
    name = details.get("device_name", device.name)
    cc = details.get("compute_capability")
    return f"{device.device_type}: {name}" + (f" (compute capability {cc[0]}.{cc[1]})"
                                              if cc else "")


def versions(packages: tuple[str, ...] = PACKAGES) -> dict:
    """Installed version of each package (None where it is not installed)."""
    out = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (ru_maxrss: KiB on Linux, bytes on macOS)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 2**20 if sys.platform == "darwin" else r / 1024
