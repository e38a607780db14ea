"""The conformance kit names what differs: the key, the step, the first differing index and
the size of the difference, for camera frames and state vectors (each failure triggered by
a real PointMass env with one bug planted)."""

from __future__ import annotations

import re

import attrs
import numpy as np
import pytest

from wamcore import Observation
from wamcore.testing import ConformanceError, check_platform, observation_difference

from wam_pointmass.env import PointMassEnv
from wam_pointmass.plugin import POINTMASS_PLATFORM
from wam_pointmass.spec import CAMERA


def platform_of(env_class):
    return attrs.evolve(POINTMASS_PLATFORM, make_env=lambda **options: env_class(**options))


class DriftingReset(PointMassEnv):
    """The second reset lands one float64 ulp away: a physics drift of ~5e-17 m."""

    resets = 0

    def reset(self, **kwargs):
        obs = super().reset(**kwargs)
        DriftingReset.resets += 1
        if DriftingReset.resets == 2:
            self._position = self._position.copy()
            self._position[1] = np.nextafter(self._position[1], np.inf)
            self._obs = None
            obs = self.observe()
        return obs


class ForgetsNoise(PointMassEnv):
    """restore() keeps the action-noise generator as it was: the rollout after it drifts from
    its first step on, while the observation at the snapshot is restored exactly."""

    def restore(self, snapshot):
        noise = self._noise_rng
        super().restore(snapshot)
        self._noise_rng = noise


class OneGreyLevel(PointMassEnv):
    """After a restore, the third step's frame is one grey level off at one pixel."""

    restored = False

    def restore(self, snapshot):
        super().restore(snapshot)
        self.restored, self.at = True, snapshot.steps + 3

    def observe(self):
        obs = super().observe()
        if self.restored and self.steps == self.at:
            frame = np.array(obs.images[CAMERA])
            frame[5, 7, 1] += 1
            obs = attrs.evolve(obs, images={CAMERA: frame})
        return obs


def test_a_reset_drift_names_the_state_vector_index_and_size():
    with pytest.raises(ConformanceError) as err:
        check_platform(platform_of(DriftingReset))
    message = str(err.value)
    assert message.startswith("reset(seed=0) twice gave different observations (not deterministic): state 'position' "
                              "differs first at index (1,)")
    size = float(re.search(r"max \|difference\| (\S+) in 1 of 2 entries", message).group(1))
    assert 1e-17 < size < 2.3e-16  # one ulp of a position below 2 m


def test_a_forgotten_restore_names_the_step_and_the_state():
    with pytest.raises(ConformanceError) as err:
        check_platform(platform_of(ForgetsNoise), options={"action_noise": 0.1})
    message = str(err.value)
    assert message.startswith("two rollouts of the same 5 actions from one snapshot differ at step 1 after it")
    assert f"camera '{CAMERA}' differs first at index" in message  # the mass is drawn elsewhere
    assert "state 'position' differs first at index (0,)" in message and "state 'velocity'" in message


def test_one_grey_level_names_the_camera_step_pixel_and_size():
    with pytest.raises(ConformanceError) as err:
        check_platform(platform_of(OneGreyLevel))
    message = str(err.value)
    assert "differ at step 3 after it" in message
    assert f"camera '{CAMERA}' differs first at index (5, 7, 1)" in message
    assert "max |difference| 1 in 1 of" in message


def test_a_control_that_differs_names_the_field():
    class Wider(PointMassEnv):
        control = attrs.evolve(POINTMASS_PLATFORM.control, high=(2.0, 2.0))

    with pytest.raises(ConformanceError, match=r"env.control differs from the registered ControlSpec: high: env "
                                               r"\(2.0, 2.0\) vs registered \(1.0, 1.0\)"):
        check_platform(platform_of(Wider))


def test_observation_difference_covers_keys_shapes_nan_and_equality():
    a = Observation(images={"c": np.zeros((2, 2, 3), np.uint8)}, state={"s": np.array([1.0, np.nan])})
    assert observation_difference(a, a) is None  # NaN where both are NaN is equal
    b = attrs.evolve(a, state={"s": np.array([1.0, np.nan, 0.0])})
    assert observation_difference(a, b) == "state 's': float64[2] vs float64[3]"
    c = attrs.evolve(a, images={"d": a.images["c"]})
    assert observation_difference(a, c) == "camera keys differ: ['c'] vs ['d']"
    assert observation_difference(a, attrs.evolve(a, step=2)) == "step 0 vs 2"
