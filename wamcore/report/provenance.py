"""Where a run ran: the host, its GPUs, and the git revision of the code that produced it.

Recorded by ``wam eval`` in ``summary.json`` and shown by the report. Nothing here imports
torch or asks a GPU anything: GPU names come from ``nvidia-smi`` when it is on the PATH, a
revision from ``git`` where a package is a checkout (an editable install); elsewhere they
are left out rather than guessed.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
from pathlib import Path
from typing import Dict, List, Mapping, Optional

_TIMEOUT_S = 5


def _run(argv: List[str]) -> Optional[str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def gpus() -> List[str]:
    """``name, memory`` of each GPU this host has (all of them, not only the visible ones)."""
    out = _run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"])
    return [line.strip() for line in out.splitlines() if line.strip()] if out else []


def host() -> dict:
    """This host: name, system, CPUs, GPUs and the CUDA_VISIBLE_DEVICES this process has."""
    return {
        "name": platform.node(),
        "system": platform.platform(terse=True),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "gpus": gpus(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def git_revision(path: Path) -> Optional[str]:
    """The short commit of the checkout holding ``path``, ``+dirty`` when its tracked files
    under ``path`` changed; None outside a checkout."""
    folder = str(path if path.is_dir() else path.parent)
    rev = _run(["git", "-C", folder, "rev-parse", "--short=12", "HEAD"])
    if not rev:
        return None
    dirty = _run(["git", "-C", folder, "status", "--porcelain", "--untracked-files=no", "--", "."])
    return rev + ("+dirty" if dirty else "")


def package_revisions(packages: Mapping[str, str]) -> Dict[str, str]:
    """``{label: revision}`` for each ``label -> importable module`` that is a git checkout."""
    out = {}
    for label, module in packages.items():
        try:
            spec = importlib.util.find_spec(module.split(".")[0])
        except (ImportError, ValueError):
            continue
        origin = spec.origin if spec is not None else None
        rev = git_revision(Path(origin).parent) if origin else None
        if rev:
            out[label] = rev
    return out


__all__ = ["host", "gpus", "git_revision", "package_revisions"]
