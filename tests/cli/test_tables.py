"""The tables every command prints (``cli/tables.py``): nothing cut in a narrow terminal."""

from __future__ import annotations

from rich.console import Console

from ray_llm_eks.cli.tables import print_rows


def test_the_gate_reports_rows_cut_nothing_at_60_columns():
    console = Console(width=60, record=True, highlight=False)
    print_rows(console, [("EFA bytes moved", "185729024123 (0.9999873 of predicted)"),
                         ("NIXL bytes / mean transfer", "185729024 / 59.43361 ms")])
    text = console.export_text()
    assert "…" not in text and "185729024123" in text and "59.43361" in text and "0.9999873" in text
