"""Gymnasium both ways for wamcore: any registered Gymnasium env as the ``gymnasium`` platform,
and :func:`make`: any wamcore platform as a ``gymnasium.Env``. Gymnasium is imported lazily."""

from .mapping import GymMapping, GymStep, UnsupportedSpaceError


def make(platform, **options):
    """A ``gymnasium.Env`` for a wamcore platform (a name or a PlatformSpec); see :mod:`wam_gymnasium.wrap`."""
    from .wrap import make as _make

    return _make(platform, **options)


__all__ = ["GymMapping", "GymStep", "UnsupportedSpaceError", "make"]
