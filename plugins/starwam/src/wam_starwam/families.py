"""StarWAM's checkpoint families and what each one's released inference path gives.

One row per family and platform, from the recipes and the released files (StarWAM
``examples/libero/configs/recipes/*.yaml``, ``examples/robotwin/configs/recipes/*.yaml``,
``LIBERO.md`` §8, ``RoboTwin.md`` §8.4; ModelScope ``panshaohua/starwam``):

| family | platform | recipe | video per camera (HxW) | steps | released checkpoint |
| --- | --- | --- | --- | --- | --- |
| MoT | LIBERO | ``starwam_libero_mot_wan22_5b`` | 224x224 | 8 | ``starwam-libero/mot/starwam_wan225b_mot.pt`` |
| Shared-DiT | LIBERO | ``starwam_libero_shared_dit_wan22_5b`` | 160x160 | 16 (+16 action) | ``starwam-libero/sharedit/starwam_wan225b_shareddit.pt`` |
| feature-conditioned | LIBERO | ``starwam_libero_feature_conditioned_wan22_5b`` | 224x224 | 10 | none released |
| MoT | RoboTwin | ``starwam_robotwin_mot_wan22_5b`` | 384x320 composed | 4 (server default) | ``starwam-robotwin/mot/starwam_wan225b_robotwin_mot.pt`` |

Capabilities: every family's ``infer_action`` returns actions only, and that is the path the
released rollout and policy server call. MoT and Shared-DiT also have ``infer_joint``
(decoded video plus actions), which no released rollout uses, and none accepts candidate
actions, so neither futures nor action-conditioned futures are declared (seed 004 audit).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import attrs

from wamcore.errors import ConfigurationError

LIBERO = "libero"
ROBOTWIN = "robotwin"


@attrs.frozen
class Family:
    name: str
    taxonomy: str
    platform: str
    recipe: str
    #: per camera (LIBERO) or the composed frame (RoboTwin), HxW, as ``data.video_size``
    video_size: Tuple[int, int]
    steps: int
    #: Shared-DiT denoises actions on their own schedule (rollout ``--action-num-inference-steps``)
    action_steps: Optional[int]
    #: path of the released checkpoint inside the ModelScope download, or None
    release: Optional[str]
    #: the release's stats file (``data.action_stats_path``, also the state stats)
    release_stats: str
    replan_steps: int
    noise_seed: Optional[int]

    @property
    def composed_size(self) -> Tuple[int, int]:
        """The image ``infer_action`` receives (LIBERO: two cameras side by side)."""
        h, w = self.video_size
        return (h, 2 * w) if self.platform == LIBERO else (h, w)


_LIBERO_RECIPES = "examples/libero/configs/recipes/"
_LIBERO_STATS = "starwam-libero/action_stats.json"
# LIBERO rollout defaults of the reported runs (recipe headers, LIBERO.md §8): replan 10, seed 42
_LIBERO = dict(platform=LIBERO, release_stats=_LIBERO_STATS, replan_steps=10, noise_seed=42)

FAMILIES: Dict[Tuple[str, str], Family] = {
    (f.name, f.platform): f
    for f in (
        Family("mot", "mot_wam", recipe=_LIBERO_RECIPES + "starwam_libero_mot_wan22_5b.yaml", video_size=(224, 224),
               steps=8, action_steps=None, release="starwam-libero/mot/starwam_wan225b_mot.pt", **_LIBERO),
        Family("shared-dit", "shared_dit_wam", recipe=_LIBERO_RECIPES + "starwam_libero_shared_dit_wan22_5b.yaml",
               video_size=(160, 160), steps=16, action_steps=16,
               release="starwam-libero/sharedit/starwam_wan225b_shareddit.pt", **_LIBERO),
        Family("feature-conditioned", "feature_conditioned_action_model",
               recipe=_LIBERO_RECIPES + "starwam_libero_feature_conditioned_wan22_5b.yaml", video_size=(224, 224),
               steps=10, action_steps=None, release=None, **_LIBERO),
        # RoboTwin: policy_server.py --num-inference-steps 4, client replan 24, server --seed None
        Family("mot", "mot_wam", platform=ROBOTWIN,
               recipe="examples/robotwin/configs/recipes/starwam_robotwin_mot_wan22_5b.yaml", video_size=(384, 320),
               steps=4, action_steps=None, release="starwam-robotwin/mot/starwam_wan225b_robotwin_mot.pt",
               release_stats="starwam-robotwin/action_stats.json", replan_steps=24, noise_seed=None),
    )
}
NAMES = ("mot", "shared-dit", "feature-conditioned")


def family(name: Optional[str], platform: str) -> Family:
    key = ((name or "mot").strip().lower().replace("_", "-"), platform)
    found = FAMILIES.get(key)
    if found is None:
        offered = sorted(n for n, p in FAMILIES if p == platform)
        raise ConfigurationError(
            f"StarWAM has no {key[0]!r} checkpoint family on {platform}: choose --checkpoint-family from {offered}"
        )
    return found


__all__ = ["Family", "FAMILIES", "NAMES", "family", "LIBERO", "ROBOTWIN"]
