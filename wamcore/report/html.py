"""``report.html``: one self-contained page per evaluation run, for people and papers.

It reads what ``wam eval`` wrote (``config.json``, ``episodes.jsonl``, ``summary.json``,
``videos/``) and writes a single HTML file with everything inlined (plots as SVG, videos as
data URIs), so it can be mailed or archived as is: the run's identity (model, checkpoint
identity, options, platform, versions, date), the per-task table, plots made with
matplotlib (success rate per task with 95% intervals, steps to success, predicted values
over an episode where the model predicts them) and the filmed episodes.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from ..errors import ConfigurationError, DependencyNotInstalled
from ..evaluation.results import read_records
from .tables import group_summaries

REPORT_INSTALL = 'pip install "wamcore[report]"'
#: videos embedded at most (a report should open in a browser, not fill a disk)
MAX_VIDEOS = 24
MAX_VIDEO_BYTES = 64 << 20

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em}td,th{padding:.25em .7em;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child,td:last-child,th:last-child{text-align:left}tr.total td{font-weight:bold;border-top:2px solid #999}
dl.identity{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;font-size:.9em}
dl.identity dt{font-weight:bold}dl.identity dd{margin:0;font-family:monospace;word-break:break-all}
.plots{display:flex;flex-wrap:wrap;gap:1em}.plot svg{max-width:100%;height:auto}
.videos{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:1em}
figure{margin:0}figcaption{font-size:.8em;font-family:monospace}video{width:100%}
.ok{color:#1a7f37}.bad{color:#c62828}
"""


def _matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise DependencyNotInstalled("matplotlib", REPORT_INSTALL, "the report's plots") from exc
    return plt


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    _matplotlib().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def plot_success_by_task(per_task: Mapping[str, Mapping[str, Any]]) -> Optional[str]:
    if not per_task:
        return None
    plt = _matplotlib()
    names = list(per_task)
    rates = [per_task[n]["success_rate"] for n in names]
    lo = [r - per_task[n]["ci95"][0] for n, r in zip(names, rates)]
    hi = [per_task[n]["ci95"][1] - r for n, r in zip(names, rates)]
    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(names) + 1.2))
    ax.barh(range(len(names)), rates, xerr=[lo, hi], color="#4c78a8", ecolor="#333", capsize=3)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("success rate (bars: 95% Wilson interval)")
    ax.set_title("Success rate per task")
    return _svg(fig)


def plot_steps(records: List[Mapping[str, Any]]) -> Optional[str]:
    steps_ok = [r["steps"] for r in records if r.get("success")]
    steps_bad = [r["steps"] for r in records if not r.get("success")]
    if not records:
        return None
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    top = max(steps_ok + steps_bad + [1])
    bins = min(30, max(5, top // 5))
    ax.hist([steps_ok, steps_bad], bins=bins, stacked=True, color=["#54a24b", "#e45756"],
            label=[f"success ({len(steps_ok)})", f"no success ({len(steps_bad)})"])
    ax.set_xlabel("steps in the episode")
    ax.set_ylabel("episodes")
    ax.set_title("Steps to success")
    ax.legend(fontsize=8)
    return _svg(fig)


def plot_values(records: List[Mapping[str, Any]], limit: int = 40) -> Optional[str]:
    """The model's predicted value at each chunk of an episode, where it predicts values."""
    with_values = [r for r in records if r.get("values")][:limit]
    if not with_values:
        return None
    plt = _matplotlib()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for r in with_values:
        ax.plot(range(1, len(r["values"]) + 1), r["values"], color="#54a24b" if r.get("success") else "#e45756",
                alpha=0.6, linewidth=1)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("chunk")
    ax.set_ylabel("predicted value")
    ax.set_title(f"Predicted values over an episode (first {len(with_values)}; green: success)")
    return _svg(fig)


def _table(summary: Mapping[str, Any]) -> str:
    def row(name: str, b: Mapping[str, Any], cls: str = "") -> str:
        stops = ", ".join(f"{html.escape(k)} {v}" for k, v in sorted(b["stop_reasons"].items()))
        cells = [html.escape(name), b["episodes"], b["successes"], f"{b['success_rate']:.3f}",
                 f"[{b['ci95'][0]:.3f}, {b['ci95'][1]:.3f}]", f"{b['mean_steps']:.1f}", stops]
        return f"<tr class='{cls}'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"

    head = "".join(f"<th>{h}</th>" for h in ("task", "episodes", "successes", "rate", "95% CI", "mean steps", "stop reasons"))
    rows = [row(n, b) for n, b in (summary.get("per_task") or {}).items()]
    suites = summary.get("per_suite") or {}
    if len(suites) > 1:
        rows += [row(f"suite {n}", b) for n, b in suites.items()]
    rows.append(row("all", summary, "total"))
    return f"<table id='per-task'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _identity(config: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    info = summary.get("model_info") or {}
    details = info.get("details") or {}
    worker = details.get("worker") or {}
    items = [
        ("model", info.get("backend") or summary.get("model")),
        ("checkpoint", info.get("checkpoint")),
        ("weights sha256", details.get("sha256")),
        ("model options", json.dumps(details.get("options") or {}, sort_keys=True)),
        ("device", info.get("device")),
        ("capabilities", ", ".join(info.get("capabilities") or [])),
        ("platform", config.get("platform")),
        ("platform options", json.dumps(config.get("platform_options") or {}, sort_keys=True)),
        ("request options", json.dumps(config.get("request_options") or {}, sort_keys=True)),
        ("instruction override", config.get("instruction")),
        ("seed", summary.get("seed")),
        *_protocol_items(config.get("protocol")),
        ("versions", json.dumps(summary.get("versions") or {"wamcore": summary.get("wamcore")}, sort_keys=True)),
        ("worker", f"{worker.get('host', '')} pid {worker.get('pid', '')} python {worker.get('python', '')}" if worker else None),
        ("executor", f"{summary.get('executor', 'local')}, {summary.get('num_envs', 1)} env(s), "
                     f"{summary.get('model_restarts', 0)} model restart(s)"),
        ("finished", summary.get("finished")),
        ("wall time", f"{summary.get('wall_s')} s"),
    ]
    return "<dl class='identity'>" + "".join(
        f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in items if v not in (None, "", "{}")
    ) + "</dl>"


def _protocol_items(protocol: Optional[Mapping[str, Any]]) -> list:
    """The evaluation protocol: its name and source, the values it set, what the command overrode."""
    if not protocol:
        return []
    return [
        ("protocol", f"{protocol['name']} ({protocol.get('model')} on {protocol.get('platform')}; {protocol.get('source')})"),
        ("protocol values", json.dumps(protocol.get("values") or {}, sort_keys=True)),
        ("protocol overrides", json.dumps(protocol.get("overrides") or {}, sort_keys=True)),
        ("protocol not applied", json.dumps(protocol.get("not_applied") or {}, sort_keys=True)),
    ]


def _videos(run_dir: Path, records: List[Mapping[str, Any]]) -> str:
    figures, total = [], 0
    for r in records:
        if not r.get("video") or len(figures) >= MAX_VIDEOS:
            continue
        path = (run_dir / r["video"]) if not Path(r["video"]).is_absolute() else Path(r["video"])
        if not path.exists() or total + path.stat().st_size > MAX_VIDEO_BYTES:
            continue
        data = path.read_bytes()
        total += len(data)
        verdict = "<span class='ok'>success</span>" if r.get("success") else "<span class='bad'>no success</span>"
        figures.append(
            f"<figure><video controls muted preload='metadata' src='data:video/mp4;base64,{base64.b64encode(data).decode()}'>"
            f"</video><figcaption>{html.escape(r['key'])}: {verdict}, {r.get('steps')} steps</figcaption></figure>"
        )
    if not figures:
        return ""
    return f"<h2>Episodes ({len(figures)} filmed)</h2><div class='videos'>{''.join(figures)}</div>"


def render(run_dir: Path) -> str:
    run_dir = Path(run_dir)
    for needed in ("config.json", "episodes.jsonl"):
        if not (run_dir / needed).exists():
            raise ConfigurationError(f"{run_dir} is not a `wam eval` output folder: it has no {needed}")
    config = json.loads((run_dir / "config.json").read_text())
    records = list(read_records(run_dir / "episodes.jsonl").values())
    summary_path = run_dir / "summary.json"
    summary: Dict[str, Any] = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    from ..execution import summarize

    summary = {**summary, **summarize(records), **group_summaries(records)}  # also for an unfinished run
    planned = len(config.get("episodes") or ())
    plots = [p for p in (plot_success_by_task(summary["per_task"]), plot_steps(records), plot_values(records)) if p]
    title = f"{summary.get('model') or config.get('backend')} on {config.get('platform')}"
    lo, hi = summary["ci95"]
    headline = (f"{summary['successes']}/{summary['episodes']} successes, rate {summary['success_rate']:.3f} "
                f"(95% CI [{lo:.3f}, {hi:.3f}])" + (f"; {planned - len(records)} of {planned} planned episodes not run"
                                                    if planned > len(records) else ""))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{_STYLE}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p id="headline">{html.escape(headline)}</p>
<h2>What produced these results</h2>
{_identity(config, summary)}
<h2>Per task</h2>
{_table(summary)}
<h2>Plots</h2>
<div class="plots">{''.join(f"<div class='plot'>{p}</div>" for p in plots)}</div>
{_videos(run_dir, records)}
</body></html>
"""


def write_report(run_dir: Path, out: Optional[Path] = None) -> Path:
    """Write ``run_dir/report.html`` (or ``out``) and return its path."""
    out = Path(out) if out is not None else Path(run_dir) / "report.html"
    out.write_text(render(Path(run_dir)))
    return out


__all__ = ["write_report", "render", "plot_success_by_task", "plot_steps", "plot_values", "REPORT_INSTALL"]
