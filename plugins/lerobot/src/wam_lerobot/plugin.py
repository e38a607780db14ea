"""wamcore hooks for LeRobot policies: the ``lerobot`` model and ``wam lerobot-test-policy``.

Imports only wamcore and this package's light modules; torch and lerobot are imported by
``wam_lerobot.worker`` (and ``wam_lerobot.testpolicy``) in the model's own environment.
"""

from __future__ import annotations

import attrs
import click

from wamcore import Capabilities, ModelSpec, Requirement, hookimpl
from wamcore.specs import ModelConfig, normalize_id

from .bridges import BRIDGES, adapter
from .policy_folder import read_if_local

NAME = "lerobot"
LEROBOT_VERSION = "0.4.4"

INSTALL = (
    f"LeRobot {LEROBOT_VERSION} in the model's own environment: where its torch pin fits (torch<2.11), "
    f"pip install \"wam-lerobot[model]\"; otherwise as .ci/install builds .venv-lerobot (docs/models/lerobot.md). "
    "Run the worker there with --am-python."
)


def configure(spec: ModelSpec, config: ModelConfig) -> ModelSpec:
    """The adapter for this deployment's policy: its cameras at its image size, the state it
    reads; a policy whose features do not fit the platform is refused here, before anything runs.
    A hub reference not fetched yet keeps the general adapter (the worker resolves it first)."""
    policy = read_if_local(config.checkpoint)
    bridge = BRIDGES.get(normalize_id(config.platform))
    if policy is None or bridge is None:
        return spec
    return attrs.evolve(spec, adapters=(adapter(bridge, policy),))


MODEL = ModelSpec(
    name=NAME,
    load="wam_lerobot.worker:load",
    adapters=tuple(adapter(bridge) for bridge in BRIDGES.values()),
    capabilities=Capabilities(actions=True),
    description=f"any LeRobot {LEROBOT_VERSION} PreTrainedPolicy (ACT, Diffusion Policy, ...) from a folder or "
                "hf://ORG/REPO@REVISION, with its own processors, on LIBERO (LeRobot's LIBERO conventions) and PointMass",
    install=INSTALL,
    requires=(
        Requirement("lerobot", install=f"pip install lerobot=={LEROBOT_VERSION}", purpose="the policy and its processors"),
        Requirement("torch", install="pip install torch", purpose="the policy's tensors"),
    ),
    timeout_s=120.0,
    configure=configure,
)


@hookimpl
def wam_register_models(register):
    register(MODEL)


@click.command(name="lerobot-test-policy")
@click.argument("policy_type", type=click.Choice(["act", "diffusion"]))
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--platform", type=click.Choice(sorted(BRIDGES)), default="libero", show_default=True)
@click.option("--resolution", type=int, default=64, show_default=True, help="LIBERO: the cameras' size (wam --resolution).")
@click.option("--seed", type=int, default=0, show_default=True)
def test_policy_command(policy_type, out, platform, resolution, seed):
    """Save a small LeRobot POLICY_TYPE policy with RANDOM weights in OUT, in LeRobot's format
    (config.json, model.safetensors, its processors), with the features PLATFORM provides.

    Never a trained policy: for tests and for trying the plugin without a download. Needs
    lerobot and torch here (the model's environment)."""
    from .testpolicy import save_test_policy

    folder = save_test_policy(policy_type, out, platform=platform, resolution=resolution, seed=seed)
    click.echo(f"saved a random-weight {policy_type} policy for {platform} in {folder}")


@hookimpl
def wam_register_commands(cli):
    cli.add_command(test_policy_command)
