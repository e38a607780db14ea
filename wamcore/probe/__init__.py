"""``wam probe``: counterfactual branches from content-addressed snapshots, scored by what
the model declares it predicts.

A probe set (:mod:`.sets`) lists contexts: a platform's env options, its reset and warm-up.
For each context the runner (:mod:`.runner`) takes a snapshot (:mod:`.snapshots`: saved
under its sha256, restorable in any env of the same configuration), asks the model for its
chunk and, where it declares ``action_conditioned_futures``, for the future of every
intervention the platform names; executes every branch from that snapshot
(:mod:`.branches`), checks that restores, repeats and branch order change nothing, and
scores the model's predictions against the real futures (:mod:`.metrics`). A metric the
model cannot support is reported as skipped with the capability it lacks.
See docs/probe.md.
"""

from .runner import run_probe
from .sets import PROBE_SETS, ProbeContext, ProbeSet, probe_set

__all__ = ["run_probe", "PROBE_SETS", "ProbeContext", "ProbeSet", "probe_set"]
