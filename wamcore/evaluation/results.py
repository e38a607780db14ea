"""An evaluation's output directory: what ran, every episode's record, the summary.

``OUT/config.json`` holds what defines the run (platform, options, episode keys); a resumed
run must match it, except that it may plan more episodes (a larger ``--episodes`` extends a
finished run). ``OUT/episodes.jsonl`` gets one line per finished episode, appended and
flushed as each finishes, by the driver alone, so an interruption loses at most the line
being written. ``OUT/summary.json`` and ``OUT/results.csv`` are written at the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Mapping

from ..errors import ConfigurationError


class ResultsDir:
    def __init__(self, out: Path):
        self.out = Path(out)
        self.config_path = self.out / "config.json"
        self.episodes_path = self.out / "episodes.jsonl"
        self.summary_path = self.out / "summary.json"
        self.csv_path = self.out / "results.csv"
        self.logs = self.out / "logs"
        self.videos = self.out / "videos"
        self._lines = None

    def prepare(self, run_config: Mapping[str, Any], *, resume: bool, overwrite: bool) -> Dict[str, dict]:
        """Create the directory; on resume, return the finished records by key (the run's
        config must match the one recorded there)."""
        if self.out.exists() and self.episodes_path.exists() and not overwrite:
            if not resume:
                raise ConfigurationError(
                    f"{self.out} already holds results: pass --resume to continue them or --overwrite to start over"
                )
            wanted = json.loads(json.dumps(run_config))
            previous = json.loads(self.config_path.read_text()) if self.config_path.exists() else {}
            planned = previous.pop("episodes", None)
            wanted_settings = {k: v for k, v in wanted.items() if k != "episodes"}
            if previous != wanted_settings:
                from ..artifacts import identity_difference

                raise ConfigurationError(f"{self.out} holds a run with other settings "
                                         f"({identity_difference(previous, wanted_settings)}); use another --out or --overwrite")
            if planned is not None and not set(planned) <= set(wanted.get("episodes", ())):
                raise ConfigurationError(
                    f"{self.out} holds a run of episodes this command does not plan; --resume may add episodes "
                    "(a larger --episodes), not drop them: use another --out or --overwrite"
                )
            self.config_path.write_text(json.dumps(run_config, indent=2) + "\n")  # extended, if it was
            done = read_records(self.episodes_path)
            self.episodes_path.write_text("".join(json.dumps(r) + "\n" for r in done.values()))
            return done
        self.out.mkdir(parents=True, exist_ok=True)
        if overwrite and self.episodes_path.exists():
            self.episodes_path.unlink()
        self.config_path.write_text(json.dumps(run_config, indent=2) + "\n")
        return {}

    def relative(self, record: Mapping[str, Any]) -> dict:
        """The record with its video path relative to this directory (the run can move)."""
        video = record.get("video")
        if not video:
            return dict(record)
        try:
            return {**record, "video": str(Path(video).resolve().relative_to(self.out.resolve()))}
        except ValueError:
            return dict(record)

    def append(self, record: Mapping[str, Any]) -> None:
        if self._lines is None:
            self._lines = open(self.episodes_path, "a")
        self._lines.write(json.dumps(record) + "\n")
        self._lines.flush()

    def write_summary(self, summary: Mapping[str, Any], records) -> None:
        """summary.json, and results.csv with one row per episode."""
        from ..report.tables import records_csv

        self.summary_path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
        self.csv_path.write_text(records_csv(records))

    def close(self) -> None:
        lines, self._lines = self._lines, None
        if lines is not None:
            lines.close()


def read_records(path: Path) -> Dict[str, dict]:
    """Records of an ``episodes.jsonl`` by key (a cut last line is skipped)."""
    out: Dict[str, dict] = {}
    for line in Path(path).read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut by an interruption
        out[row["key"]] = row
    return out


__all__ = ["ResultsDir", "read_records"]
