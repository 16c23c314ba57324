"""Shared by the command line's tests: typer's CliRunner, and a configuration file written for a test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], str]:
    """A configuration for a test about something else than pinning: strict false unless it says."""

    def write(text: str) -> str:
        path = tmp_path / "deployment.yaml"
        path.write_text(text if "strict:" in text else f"strict: false\n{text}")
        return str(path)

    return write
