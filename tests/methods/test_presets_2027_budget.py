"""The tiny smoke tables list Fed-pilot and FedHL (issue 46: each new method in the tiny presets)."""

from pathlib import Path

import pytest

from fedbench.runners.core.sweep import load_sweep

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize("preset", ["tiny_text_all.yaml", "tiny_vision_all.yaml"])
def test_tiny_smoke_tables_list_fed_pilot_and_fedhl(preset):
    assert {"fed_pilot", "fedhl"} <= {r.spec.method for r in load_sweep(BENCH / preset)}
