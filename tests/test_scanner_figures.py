"""The figures docs/threat-model.md quotes for checkov and trivy ("Scanners") are the ones the
scanners report on every build (tests/helpers/scanners.py), so the document cannot drift.

After a change to the template or the manifests, regenerate the table with
``make scanner-figures`` (this test with ``RAY_LLM_EKS_UPDATE_SCANNER_FIGURES=1``), or paste the
table the failure prints.
"""

from __future__ import annotations

import os

import pytest

from helpers.scanners import DOC, FIGURES_BEGIN, FIGURES_END, checkov_figures, figures_table, quoted_table

pytestmark = pytest.mark.integration

UPDATE = os.environ.get("RAY_LLM_EKS_UPDATE_SCANNER_FIGURES") == "1"


def test_the_threat_model_quotes_the_figures_both_scanners_report_on_every_build(checkov_scan, trivy_scan):
    _, trivy = trivy_scan
    measured = figures_table(checkov_figures(checkov_scan), trivy)
    text = DOC.read_text()
    if UPDATE:
        start, end = text.index(FIGURES_BEGIN) + len(FIGURES_BEGIN), text.index(FIGURES_END)
        DOC.write_text(f"{text[:start]}\n{measured}\n{text[end:]}")
        text = DOC.read_text()
    assert quoted_table(text) == measured, (
        f"docs/threat-model.md quotes other scanner figures; run `make scanner-figures`, or paste between "
        f"the markers:\n{measured}")


def test_the_table_is_one_row_per_build_with_whole_numbers():
    table = quoted_table(DOC.read_text()).splitlines()
    from helpers.scanners import BUILDS

    assert [row.split("|")[1].strip() for row in table[2:]] == list(BUILDS)
    assert all(cell.strip().isdigit() for row in table[2:] for cell in row.split("|")[2:-1])
