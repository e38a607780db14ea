"""Will N env processes fit in memory? Refuse an N that does not, before starting any.

A platform declares what one env process holds (``PlatformSpec.env_memory_mb``; LIBERO
measured about 2 GB here). Linux tells what is available (``MemAvailable``: free memory
plus what the kernel can reclaim). A tenth of it stays in reserve for the driver, the
model worker and the page cache.
"""

from __future__ import annotations

from typing import Optional

from ..errors import ConfigurationError
from ..specs import PlatformSpec

RESERVE = 0.10


def available_memory_mb() -> Optional[float]:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def envs_that_fit(per_env_mb: float, available_mb: float) -> int:
    return max(0, int(available_mb * (1.0 - RESERVE) // per_env_mb))


def check_num_envs(platform: PlatformSpec, num_envs: int, *, available_mb: Optional[float] = None) -> None:
    """ConfigurationError when ``num_envs`` env processes of ``platform`` do not fit."""
    per_env = platform.env_memory_mb
    if num_envs <= 1 or not per_env:
        return
    available = available_memory_mb() if available_mb is None else available_mb
    if available is None:
        return  # not Linux: nothing to go by
    fit = envs_that_fit(per_env, available)
    if num_envs > fit:
        raise ConfigurationError(
            f"--num-envs {num_envs} does not fit: each {platform.name} env process holds about "
            f"{_size(per_env)}, {num_envs} need {_size(num_envs * per_env)}, and this machine has "
            f"{_size(available)} available ({int(RESERVE * 100)}% kept in reserve): at most {fit} fit. "
            "Lower --num-envs, free memory, or pass --skip-memory-check if you know better."
        )


def _size(mb: float) -> str:
    """MB below a GB (a PointMass env's 60 MB is not "0.1 GB"), GB above."""
    return f"{mb:.0f} MB" if mb < 1024 else f"{mb / 1024:.1f} GB"


__all__ = ["available_memory_mb", "envs_that_fit", "check_num_envs"]
