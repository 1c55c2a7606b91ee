"""What a result was computed with: lengen (and its git commit), Python, torch and its CUDA build,
the devices torch sees, its thread count, and the versions of the libraries lengen uses.

`lengen env` prints it and bug reports ask for it (README). Versions are read from the installed
distributions' metadata, so nothing optional (transformers, Ray) is imported to report it.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import torch

import lengen

# distributions reported beside torch: lengen's dependencies and optional extras
LIBRARIES = ("transformers", "tokenizers", "huggingface-hub", "numpy", "pandas", "matplotlib",
             "tqdm", "pyyaml", "ray", "triton")


def version_of(distribution: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@functools.cache   # once per process: a run's records all name the code that started it
def git_commit() -> str | None:
    """The commit of the lengen checkout in use (with "+changes" when its files differ from it),
    or None when lengen was not imported from a git checkout."""
    root = Path(lengen.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no",
                                "--", "lengen"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def cuda_devices() -> list[str]:
    """The GPUs torch sees, as "cuda:N NAME (capability X.Y, M GiB)"."""
    if not torch.cuda.is_available():
        return []
    found = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        found.append(f"cuda:{i} {p.name} (capability {p.major}.{p.minor}, "
                     f"{p.total_memory / 2**30:.0f} GiB)")
    return found


def _code() -> dict:
    """The code a result came from: lengen and its commit, Python, torch and its CUDA build."""
    return {"lengen": lengen.__version__, "lengen_commit": git_commit(), "python": platform.python_version(),
            "torch": torch.__version__, "torch_cuda_build": torch.version.cuda}


def describe() -> dict:
    """Everything above as a flat dict of strings (None: not installed / not available)."""
    info = {
        **_code(),
        "platform": platform.platform(),
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
        "cuda_devices": "; ".join(cuda_devices()) or None,
        "torch_threads": str(torch.get_num_threads()),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "openmp_wait_policy": lengen.OPENMP_WAIT,
    }
    info.update({name: version_of(name) for name in LIBRARIES})
    return info


def one_line() -> str:
    """`lengen --version`: lengen, torch with its CUDA build, transformers, Python."""
    info = describe()
    commit = f" (commit {info['lengen_commit']})" if info["lengen_commit"] else ""
    return (f"lengen {info['lengen']}{commit}, torch {info['torch']} "
            f"(CUDA {info['torch_cuda_build'] or 'none'}; GPUs: {info['cuda_devices'] or 'none'}), "
            f"transformers {info['transformers'] or 'not installed'}, Python {info['python']}")


def run_environment(device=None) -> dict:
    """What a run's numbers were computed with, kept in its records (eval.json): lengen and its
    commit, Python, torch and its CUDA build, transformers (None when not installed), the device
    (and the GPU's name), torch's CPU thread count, which changes results on the CPU (float
    sums split differently across threads), and the CPU kernels torch picked (`cpu_capability`:
    AVX2, AVX512, ...), which can change them across machines: the same 1-thread CHE run at the
    same commit scored 0.4770 on an earlier session's machine (not recorded) and 0.4709 on an AVX2
    one (docs/results/demo.md)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    info = {**_code(), "transformers": version_of("transformers"), "device": str(device),
            "threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if device.type == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(device)
    return info
