"""LIBERO's privileged state: the simulator's ground truth, for reference policies only.

``LiberoEnv.privileged_state()`` returns it; ``wam_act`` hands it (``PredictRequest.privileged``)
only to a model that declares the ``privileged_state`` capability, and both ends of the model
boundary refuse it to any other model. It is what a scripted policy needs to act without
images, read from LIBERO's own bookkeeping (Lifelong-Robot-Learning/LIBERO
``libero/libero/envs/bddl_base_domain.py``: ``parsed_problem``, ``objects_dict``,
``fixtures_dict``, ``object_sites_dict``, ``obj_body_id``):

``goal``
    the task's BDDL goal, a list of predicates, each a list of lower-case words
    (``[["on", "akita_black_bowl_1", "plate_1"]]``, ``[["open", "wooden_cabinet_1_middle_region"]]``);
``objects``
    ``{bddl name: [x, y, z, qx, qy, qz, qw]}``, the world pose of every object's and fixture's
    root body (metres; the quaternion in robosuite's x, y, z, w order);
``extents``
    ``{bddl name: [xmin, ymin, zmin, xmax, ymax, zmax]}``, the world-axis box around the
    collision geoms of every object and fixture (MuJoCo's ``geom_aabb`` of each, turned into
    the world; the visual ones where it has none): how tall an object stands, how wide it is;
``bodies``
    the same for every other body of an object or fixture, by MuJoCo name
    (``wooden_cabinet_1_cabinet_middle``, ``flat_stove_1_button``...);
``sites``
    ``{site name: [x, y, z, sx, sy, sz]}`` for the scene's named regions (bddl regions such as
    ``main_table_stove_front_region``, ``basket_1_contain_region``): world position and
    MuJoCo half-sizes;
``joints``
    ``{joint name: qpos}`` for every one-dof joint of the scene that is not the robot's
    (drawer slides, the stove's knob).
"""

from __future__ import annotations

from typing import Any

import numpy as np

_SLIDE_OR_HINGE = (2, 3)  # mjtJoint: mjJNT_SLIDE, mjJNT_HINGE


def _pose(data, body_id: int) -> np.ndarray:
    w, x, y, z = data.xquat[body_id]
    return np.concatenate([data.xpos[body_id], [x, y, z, w]]).astype(np.float64)


def read_privileged(robosuite_env: Any) -> dict:
    """The privileged state of a LIBERO robosuite env (see the module docstring)."""
    model, data = robosuite_env.sim.model._model, robosuite_env.sim.data._data
    import mujoco

    roots = dict(robosuite_env.obj_body_id)
    names = tuple(roots)
    objects = {name: _pose(data, body) for name, body in roots.items()}
    root_ids = set(roots.values())
    extents = {name: _extent(model, data, body) for name, body in roots.items()}
    bodies = {}
    for body in range(model.nbody):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body) or ""
        if body not in root_ids and name.startswith(names):
            bodies[name] = _pose(data, body)
    sites = {}
    for name in robosuite_env.object_sites_dict:
        site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, name)
        if site >= 0:
            sites[name] = np.concatenate([data.site_xpos[site], model.site_size[site]]).astype(np.float64)
    joints = {}
    for joint in range(model.njnt):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, joint) or ""
        if model.jnt_type[joint] in _SLIDE_OR_HINGE and not name.startswith(("robot", "gripper")):
            joints[name] = float(data.qpos[model.jnt_qposadr[joint]])
    goal = [[str(word).lower() for word in predicate] for predicate in robosuite_env.parsed_problem["goal_state"]]
    return {"goal": goal, "objects": objects, "extents": extents, "bodies": bodies, "sites": sites, "joints": joints}


_CORNERS = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=np.float64)


def _extent(model, data, root: int) -> np.ndarray:
    """World-axis bounds of the geoms under the body tree of ``root``."""
    geoms = np.flatnonzero(model.body_rootid[model.geom_bodyid] == root)
    solid = geoms[(model.geom_contype[geoms] != 0) | (model.geom_conaffinity[geoms] != 0)]
    geoms = solid if len(solid) else geoms
    if len(geoms) == 0:
        p = data.xpos[root]
        return np.concatenate([p, p])
    points = []
    for g in geoms:
        box = model.geom_aabb[g]  # centre (3) and half sizes (3), in the geom's frame
        local = box[:3] + _CORNERS * box[3:]
        points.append(data.geom_xpos[g] + local @ data.geom_xmat[g].reshape(3, 3).T)
    points = np.concatenate(points)
    return np.concatenate([points.min(axis=0), points.max(axis=0)])


__all__ = ["read_privileged"]
