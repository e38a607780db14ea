"""Write docs/cli.md, the command-line reference, from the click commands themselves.

    python docs/cli_reference.py          # rewrite docs/cli.md
    python docs/cli_reference.py --check  # exit 1 if docs/cli.md is stale (tests/test_docs.py does this)

Only wamcore's own commands and options are listed (no plugin is loaded), so the page does
not depend on what is installed here.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Iterator, List

import click

OUT = Path(__file__).resolve().with_name("cli.md")
WIDTH = 100

HEADER = """# Command-line reference

Generated from the click commands by `python docs/cli_reference.py` (`tests/test_docs.py`
fails when this page is stale); do not edit it by hand. It lists wamcore's own options.
`wam run` and `wam eval` also take the options of the chosen platform and model, listed by
`--help` under "Platform options (NAME)" and "Model options (NAME)" once `--platform` and
`--am-backend` are on the command line (`wam eval --platform libero --am-backend starwam
--help`). `wam serve` takes the options of its `--protocol`: those of wamcore's own protocol
are listed here, a plugin's under "Serving protocol options (NAME)" (`wam serve --protocol
openpi --am-backend ID --platform ID --help`); plugins may add commands of their own (`wam
--help` lists them).

GPUs, in one place: `--am-cuda-device`, else `--cuda-device`, else the inherited
`CUDA_VISIBLE_DEVICES`, is what a worker started with `--am-python` sees; a backend's own
`--device` (where it has one) chooses where the model runs among those; a model run in this
process (no `--am-python`, no `--am-endpoint`) sees this process's `CUDA_VISIBLE_DEVICES`.
"""


@contextlib.contextmanager
def _own_params(command: click.Command) -> Iterator[None]:
    """A paired command's own options only (parsing may have added a plugin's)."""
    if not hasattr(command, "own_params"):
        yield
        return
    params, command.params = command.params, command.own_params()
    try:
        yield
    finally:
        command.params = params


def _sections(command: click.Command, parent: click.Context, name: str) -> List[str]:
    from wamcore.registry import Registry

    ctx = click.Context(command, info_name=name, parent=parent, obj=Registry(entry_points=False),
                        terminal_width=WIDTH, max_content_width=WIDTH)
    with _own_params(command):
        text = command.get_help(ctx)
    title = " ".join(["wam", *ctx.command_path.split()[1:]])
    out = [f"## `{title}`\n", "```text", text.rstrip(), "```\n"]
    if isinstance(command, click.Group):
        for sub in sorted(command.commands):
            out += _sections(command.commands[sub], ctx, sub)
    return out


def render() -> str:
    from wamcore.cli import cli
    from wamcore.registry import Registry

    root = click.Context(cli, info_name="wam", obj=Registry(entry_points=False), terminal_width=WIDTH,
                         max_content_width=WIDTH)
    lines = [HEADER, "## `wam`\n", "```text", cli.get_help(root).rstrip(), "```\n"]
    for name in sorted(cli.commands):
        lines += _sections(cli.commands[name], root, name)
    return "\n".join(lines)


def main(argv: List[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python docs/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
