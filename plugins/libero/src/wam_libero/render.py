"""The fast-render option: per-env MuJoCo visual settings that make CPU rendering ~2.5x faster.

Measured by the project (``MUJOCO_GL=egl python bench/libero_step.py [--fast-render]``,
docs/platforms/libero.md "Speed"): with Mesa llvmpipe, two LIBERO cameras at 256 px cost
~250 ms per step, mostly the fixed cost of 4x MSAA on robosuite's 640x480 offscreen buffer
(``robosuite/utils/binding_utils.py`` ``MjRenderContext``) and a reflection pass (LIBERO's
table, bowls and cabinet have ``reflectance > 0``). Turning both off and sizing the buffer to
the camera brings it to ~90 ms. **Pixels change** (mean abs difference ~1-2 of 255,
reflections vanish), so an evaluation either uses it for every episode or for none; the
``fast_render`` platform option is recorded in ``wam eval``'s config.json.

Applied to one env's own model and render context (not by patching robosuite's classes), so
envs with and without it can coexist in one process.
"""

from __future__ import annotations

from typing import Any


def apply_fast_render(robosuite_env: Any, resolution: int) -> None:
    """Rebuild the env's offscreen context without MSAA, sized to ``resolution``, no reflections."""
    import mujoco

    sim = robosuite_env.sim
    context = sim._render_context_offscreen
    if context is None:
        raise RuntimeError("fast render needs the env's offscreen renderer (has_offscreen_renderer=True)")
    model = sim.model._model
    model.vis.quality.offsamples = 0
    model.vis.global_.offwidth = int(resolution)
    model.vis.global_.offheight = int(resolution)
    context.gl_ctx.make_current()
    context.con.free()
    context._set_mujoco_context_and_buffers()  # re-reads offsamples/offwidth from the model
    context.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0


__all__ = ["apply_fast_render"]
