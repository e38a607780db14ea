"""The upstream model code a plugin runs, pinned to a full git commit, and how to install it.

A model plugin declares :class:`UpstreamSource` values in ``ModelSpec.upstream``;
``wam upstream install MODEL`` installs them into the model's environment. The code is
fetched at the pinned commit (``git fetch --depth 1 REPO SHA``), or taken from a folder of
source archives made with ``git archive`` at that commit (``--archives DIR``, what CI uses),
and installed editable, the way each upstream's README installs it (their recipes and configs
live in the checkout, outside the package). The plugins' own distribution metadata names no
direct reference (PyPI refuses them): the commit lives here, in code.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import List, Optional, Tuple

import attrs

from .weights import FULL_SHA


@attrs.frozen
class UpstreamSource:
    """One upstream repository at one commit. ``install`` is ``"editable"`` (``pip install -e``
    of the checkout, with ``pip_args``) or ``"path"`` (the checkout goes on ``sys.path`` through
    a ``.pth`` file: for code whose package metadata does not install). ``archive`` is the
    name of its ``git archive`` file in an archive folder, whose top folder is ``folder``."""

    name: str
    repository: str
    commit: str
    folder: str
    archive: str = ""
    install: str = "editable"
    pip_args: Tuple[str, ...] = attrs.field(default=(), converter=tuple)
    note: str = ""

    def __attrs_post_init__(self):
        if not FULL_SHA.match(self.commit):
            raise ValueError(f"upstream {self.name}: commit must be a full 40-character sha, got {self.commit!r}")
        if self.install not in ("editable", "path"):
            raise ValueError(f"upstream {self.name}: install is 'editable' or 'path', not {self.install!r}")

    @property
    def label(self) -> str:
        return f"{self.name} {self.commit[:7]}"

    def requirement(self) -> Optional[str]:
        """The PEP 508 direct reference of a non-editable install (``pip install "NAME @ git+..."``)."""
        return f"{self.name} @ git+{self.repository}@{self.commit}" if self.install == "editable" else None


def fetch_commands(source: UpstreamSource, into: Path, archives: Optional[Path] = None) -> List[str]:
    """Shell commands that put ``source``'s checkout at ``into/source.folder``: from its archive
    when ``archives`` is given, else by git at the pinned commit. Idempotent: a marker file
    names the commit in place."""
    where, q = into / source.folder, shlex.quote
    marker = q(str(where / f".wam-upstream-{source.commit}"))
    if archives is not None:
        get = f"mkdir -p {q(str(into))} && tar xzf {q(str(archives / source.archive))} -C {q(str(into))}"
    else:
        get = (f"git init -q {q(str(where))} && git -C {q(str(where))} fetch -q --depth 1 {q(source.repository)} "
               f"{source.commit} && git -C {q(str(where))} checkout -q {source.commit}")
    return [f"test -f {marker} || {{ rm -rf {q(str(where))} && {get} && touch {marker}; }}"]


def install_commands(source: UpstreamSource, python: str, into: Path) -> List[str]:
    """Shell commands that install the checkout at ``into/source.folder`` for ``python``."""
    where, q = into / source.folder, shlex.quote
    if source.install == "editable":
        return [" ".join([q(python), "-m", "pip", "install", *map(q, source.pip_args), "-e", q(str(where))])]
    site = f"$({q(python)} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
    return [f"echo {q(str(where.absolute()))} > \"{site}/{source.folder}-{source.commit[:7]}.pth\""]


def commands(source: UpstreamSource, python: str, into: Path, archives: Optional[Path] = None) -> List[str]:
    """Fetch, then install: what ``wam upstream install`` runs."""
    return fetch_commands(source, into, archives) + install_commands(source, python, into)


__all__ = ["UpstreamSource", "commands", "fetch_commands", "install_commands"]
