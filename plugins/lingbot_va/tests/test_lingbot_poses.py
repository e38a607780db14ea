"""The client's pose arithmetic, value by value against an independent computation with SciPy:
upstream's ``add_init_pose`` (``evaluation/robotwin/eval_polict_client_openpi.py``, 6f092cb),
transcribed here with SciPy's ``Rotation`` exactly as the client calls it, then the client's
re-normalisation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation as R

from wamcore.errors import PredictionError
from wam_lingbot_va.robotwin import check_chunk, compose, executed_rows
from lingbot_standins import upstream_client_row


def random_init(rng) -> np.ndarray:
    """RoboTwin's initial endposes: world xyz and a unit quaternion, scalar first, per arm."""
    arms = []
    for _ in range(2):
        q = rng.normal(size=4)
        arms.append(np.concatenate([rng.uniform(-0.5, 0.5, 3) + [0, 0, 0.9], q / np.linalg.norm(q), [1.0]]))
    return np.concatenate(arms)


def random_action(rng) -> np.ndarray:
    """What the server returns for one step: small translations, an unnormalised quaternion."""
    arm = lambda: np.concatenate([rng.uniform(-0.1, 0.4, 3), rng.uniform(-1, 1, 4), rng.uniform(0, 1, 1)])
    return np.concatenate([arm(), arm()]).astype(np.float32)


def test_compose_equals_the_upstream_client_with_scipy():
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(2000):
        init, action = random_init(rng), random_action(rng)
        ours, theirs = compose(action, init), upstream_client_row(action, init)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-15)
        worst = max(worst, float(np.abs(ours - theirs).max()))
        # what the simulator gets is float32: equal there
        np.testing.assert_array_equal(ours.astype(np.float32), theirs.astype(np.float32))
    assert worst <= 4.5e-16  # the two differ by rounding only (SciPy computes the cross product elsewhere)


def test_the_quaternion_order_quirk_is_reproduced_not_fixed():
    """SciPy reads RoboTwin's scalar-first arrays as scalar-last; the client composes them so.
    A "correct" composition (scalar first on both sides) gives another rotation."""
    rng = np.random.default_rng(1)
    init, action = random_init(rng), random_action(rng)
    ours = compose(action, init)
    wxyz = lambda q: np.roll(q, -1)  # scalar first -> SciPy's order
    correct = (R.from_quat(wxyz(init[3:7])) * R.from_quat(wxyz(action[3:7].astype(np.float64)))).as_quat()
    assert not np.allclose(np.abs(ours[3:7]), np.abs(np.roll(correct, 1)), atol=1e-3)


def test_translation_is_added_and_the_gripper_is_absolute():
    init = np.array([0.1, 0.2, 0.9, 1, 0, 0, 0, 0.3, -0.1, 0.2, 0.8, 1, 0, 0, 0, 0.4])
    action = np.array([0.01, 0.02, 0.03, 0, 0, 0, 2, 0.9, -0.01, 0, 0, 0, 0, 0, 5, 0.1], dtype=np.float32)
    row = compose(action, init)
    np.testing.assert_allclose(row[[0, 1, 2, 8, 9, 10]], [0.11, 0.22, 0.93, -0.11, 0.2, 0.8], atol=1e-7)
    assert row[7] == pytest.approx(0.9) and row[15] == pytest.approx(0.1)
    assert np.linalg.norm(row[3:7]) == pytest.approx(1.0) and np.linalg.norm(row[11:15]) == pytest.approx(1.0)


def test_rows_run_frame_by_frame_and_the_first_chunks_frame_0_is_skipped():
    rng = np.random.default_rng(2)
    init = random_init(rng)
    chunk = np.stack([random_action(rng) for _ in range(32)], axis=1).reshape(16, 2, 16)
    first, later = executed_rows(chunk, init, first=True), executed_rows(chunk, init, first=False)
    assert len(first) == 16 and len(later) == 32
    np.testing.assert_array_equal(first, later[16:])
    np.testing.assert_array_equal(later[1], compose(chunk[:, 0, 1], init))  # frame 0, action 1


@pytest.mark.parametrize("bad, problem", [
    (np.zeros((16, 2, 16), dtype=np.int32), "must be floats"),
    (np.zeros((16, 2, 20), dtype=np.float32), "must have shape [16, frames, 16]"),
    (np.zeros((14, 2, 16), dtype=np.float32), "must have shape [16, frames, 16]"),
    (np.full((16, 2, 16), np.nan, dtype=np.float32), "NaN or inf"),
    (np.zeros((16, 2, 16), dtype=np.float32), "quaternion is zero"),
    (None, "must be floats"),
])
def test_a_malformed_server_chunk_is_refused(bad, problem):
    with pytest.raises(PredictionError) as info:
        check_chunk(bad)
    assert problem in str(info.value)
