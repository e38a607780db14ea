"""A sentinel model for the hardening and fuzz tests, on the ``toy-big`` platform of
``wamtest_scripted`` (256x256 cameras: requests take the shared-memory path).

Loaded like ``wamtest_scripted`` (``WAMCORE_PLUGIN_MODULES=wamtest_scripted,wamtest_fuzz``).
Model ``sentinel-wam`` re-checks, on its own and strictly, everything that reaches it
(cameras, dtypes, shapes, finite and float32-representable state, instruction, seed, step,
options; ``sentinel-cf-wam`` also takes candidate actions, and checks them against toy's
control) and counts its calls and every violation: a fuzz run proves that no malformed
input reached a model by reading ``violations`` and comparing ``calls`` with the
predictions that were answered. A per-request ``delay`` keeps it busy (lifecycle tests).
"""

from __future__ import annotations

import os
import time

import numpy as np

from wamcore import Adapter, Capabilities, ModelSpec, Option, Prediction, hookimpl

import wamtest_scripted as toy

FLOAT32_MAX = float(np.finfo(np.float32).max)


class SentinelModel:
    timeout_s = 20.0

    def __init__(self, candidates: bool = False):
        self.candidates = candidates  # declares action_conditioned_futures (sentinel-cf-wam)
        self.calls = 0
        self.violations: list = []
        self.files: list = []

    def _check(self, native) -> list:
        problems = []
        images = native["images"]
        if set(images) != {"primary", "wrist"}:
            problems.append(f"cameras {sorted(images)}")
        for role, img in images.items():
            if not (isinstance(img, np.ndarray) and img.dtype == np.uint8 and img.shape == (*toy.BIG_SIZE, 3)):
                problems.append(f"camera {role}: {type(img).__name__} {getattr(img, 'dtype', '')} {getattr(img, 'shape', '')}")
        state = native["state"]
        pos = state.get("position")
        if set(state) != {"position"} or not isinstance(pos, np.ndarray) or pos.shape != (2,) or pos.dtype.kind not in "iuf":
            problems.append(f"state {sorted(state)}")
        elif not (np.isfinite(pos).all() and (np.abs(pos.astype(np.float64)) <= FLOAT32_MAX).all()):
            problems.append(f"position {pos.tolist()}")
        instruction = native["instruction"]
        if not isinstance(instruction, str) or not instruction.strip():
            problems.append(f"instruction {instruction!r:.80}")
        seed = native["seed"]
        if seed is not None and (type(seed) is not int or not 0 <= seed < 2**63):
            problems.append(f"seed {seed!r:.80}")
        step = native["step"]
        if type(step) is not int or not 0 <= step < 2**63:
            problems.append(f"step {step!r:.80}")
        options = native["options"]
        if set(options) - {"delay", "open_files"} or not isinstance(options.get("delay", 0.0), (int, float)) \
                or isinstance(options.get("delay"), bool) or not np.isfinite(options.get("delay", 0.0)):
            problems.append(f"options {options!r:.80}")
        candidate = native["candidate"]
        if candidate is not None and not self.candidates:
            problems.append("candidate actions without the capability")
        elif candidate is not None and not (isinstance(candidate, np.ndarray) and candidate.dtype.kind == "f"
                                            and candidate.shape == (1, 2) and np.isfinite(candidate).all()
                                            and (np.abs(candidate) <= 1.0 + 1e-5).all()):  # toy's control bounds
            problems.append(f"candidate actions {candidate!r:.80}")
        return problems

    def predict_native(self, native, request):
        self.calls += 1
        problems = self._check(native)
        if problems and len(self.violations) < 100:
            self.violations.append("; ".join(problems))
        for _ in range(int(native["options"].get("open_files") or 0)):
            self.files.append(os.open(os.devnull, os.O_RDONLY))
        delay = float(native["options"].get("delay") or 0.0)
        if delay > 0:
            time.sleep(delay)
        return {"calls": self.calls, "violations": len(self.violations), "first_violation":
                self.violations[0] if self.violations else None, "pid": os.getpid(),
                "sums": {role: int(img.sum(dtype=np.int64)) for role, img in native["images"].items()}}


def encode(request):
    obs = request.observation
    return {"images": dict(obs.images), "state": dict(obs.state), "instruction": request.effective_instruction,
            "seed": request.seed, "step": obs.step, "options": dict(request.options), "candidate": request.candidate_actions}


def decode(native, request):
    return Prediction(actions=np.zeros((1, 2), np.float32), info=native)


@hookimpl
def wam_register_models(register):
    register(ModelSpec(
        name="sentinel-wam", load=lambda config: SentinelModel(), capabilities=Capabilities(actions=True),
        adapters=[Adapter(contract=toy.BIG_CONTRACT, encode=encode, decode=decode)], timeout_s=20.0,
        options=(Option("delay", type="float", default=None, deployment=False, help="Seconds each prediction sleeps."),
                 Option("open-files", type="int", default=None, deployment=False,
                        help="Descriptors the model opens and keeps (a leak)."),),
    ))
    register(ModelSpec(
        name="sentinel-cf-wam", load=lambda config: SentinelModel(candidates=True),
        capabilities=Capabilities(actions=True, action_conditioned_futures=True),
        adapters=[Adapter(contract=toy.BIG_CONTRACT, encode=encode, decode=decode)], timeout_s=20.0,
    ))
