"""What an evaluation leaves for people: per-task tables and CSV (``tables``), episode
videos (``wamcore.video``), and a self-contained HTML report with plots (``html``)."""

from .tables import format_table, group_summaries, records_csv

__all__ = ["format_table", "group_summaries", "records_csv"]
