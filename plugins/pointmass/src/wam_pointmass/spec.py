"""PointMass's physical observation and control, as wamcore contracts (numpy-free, import-light).

Every number a model or a user relies on is defined here once: the arena, the actuation
scale and the control rate that the versioned action space ``pointmass.acceleration.v1``
pins, and the observation's camera size and state units. ``docs/platforms/pointmass.md``
explains them.
"""

from __future__ import annotations

from wamcore import CameraInfo, ControlSpec, ObservationSpec

PLATFORM = "pointmass"
ACTION_SPACE = "pointmass.acceleration.v1"
CAMERA = "primary"
IMAGE_SIZE = 64

#: The arena is the square [-ARENA, ARENA]^2 metres; +x points right, +y points up.
ARENA = 1.0
#: The mass's centre stays inside [-WALL, WALL]^2 (its disc touches the arena edge there).
AGENT_RADIUS = 0.08
WALL = ARENA - AGENT_RADIUS
#: Targets are discs; success is the mass's centre inside the named one.
TARGET_RADIUS = 0.12
#: One action lasts DT seconds; an action of 1.0 commands MAX_ACCEL m/s^2.
DT = 0.1
MAX_ACCEL = 2.0
#: Viscous drag (1/s): the speed under a constant full command tends to MAX_ACCEL / DRAG.
DRAG = 1.0
DEFAULT_MAX_STEPS = 60
#: Task families: ``reach`` (the original task) and ``pit``, where a pit lies across the
#: direct route to the goal; a mass whose centre enters the pit is stuck there for good.
FAMILIES = ("reach", "pit")
PIT_RADIUS = 0.2
#: The longest chunk the platform executes from one prediction (6.4 s).
CHUNK_MAX = 64

#: Target colours in a fixed order (the name is the instruction's word); RGB uint8.
COLOURS = {
    "red": (220, 50, 47),
    "green": (60, 180, 75),
    "blue": (38, 110, 230),
    "yellow": (235, 200, 30),
}
AGENT_COLOUR = (255, 255, 255)
FLOOR_COLOUR = (40, 40, 48)
PIT_COLOUR = (0, 0, 0)

POINTMASS_CONTROL = ControlSpec(
    action_space=ACTION_SPACE,
    action_names=("accel_x", "accel_y"),
    chunk_min=1,
    chunk_max=CHUNK_MAX,
    low=(-1.0, -1.0),
    high=(1.0, 1.0),
    rate_hz=1.0 / DT,
    description=(
        f"commanded acceleration of the point mass along +x (right) and +y (up), as a fraction of "
        f"{MAX_ACCEL:g} m/s^2, in [-1, 1]; each action is held for {DT:g} s (10 Hz); the mass also "
        f"feels a drag of {DRAG:g}/s times its velocity"
    ),
)

POINTMASS_OBSERVATION = ObservationSpec(
    cameras={CAMERA: (IMAGE_SIZE, IMAGE_SIZE)},
    state={"position": 2, "velocity": 2},
    units={
        "position": "m, arena frame: x right, y up, origin at the centre, arena [-1, 1]^2",
        "velocity": "m/s, arena frame: x right, y up",
        CAMERA: "RGB uint8, top-down view of the whole arena, row 0 = top (y = +1), column 0 = left (x = -1)",
    },
    camera_info={CAMERA: CameraInfo("wam_pointmass.render.draw_frame", "none",
                                    "drawn with numpy, top-down, no simulator camera")},
)


def instruction_for(colour: str) -> str:
    """The task's instruction, naming the goal target by its colour."""
    return f"go to the {colour} target"
