"""The presets list the 2024-2026 federated LoRA methods: the tiny smoke tables list all of
them, and the real-data presets load, with fedavg's runs the very runs of the presets they
extend (shared records, comparable rows)."""

from pathlib import Path

import pytest
from smoke import preset_here

from fedbench.runners.core.sweep import load_sweep

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
NEW = {"fed_plora", "raflora", "hlora", "ffa_lora", "fedex_lora", "lora_fair", "fedsa_lora", "fed_sb"}
ALTERNATING = {"rolora", "rolora_het", "lora_a2"}  # shared/docs/methods-2027.md


@pytest.mark.parametrize("preset", ["tiny_text_all.yaml", "tiny_vision_all.yaml"])
def test_tiny_smoke_tables_list_every_new_method(preset):
    assert NEW | ALTERNATING <= {r.spec.method for r in load_sweep(BENCH / preset)}


@pytest.mark.parametrize("preset,base,methods", [
    ("licenses_2026_cpu.yaml", "licenses_cpu.yaml", NEW | {"fedavg"}),
    ("pacs_lora_fair_cpu.yaml", "pacs_cpu.yaml", {"fedavg", "lora_fair"}),
])
def test_real_data_presets_extend_their_base(preset, base, methods, tmp_path):
    """With or without ``../shared`` (:func:`smoke.preset_here`: a stand-in data folder, the same run ids)."""
    runs = load_sweep(preset_here(BENCH / preset, tmp_path))
    assert {r.spec.method for r in runs} == methods
    fedavg = lambda rs: {r.spec.run_id for r in rs if r.spec.method == "fedavg"}  # noqa: E731
    assert fedavg(runs) == fedavg(load_sweep(preset_here(BENCH / base, tmp_path)))
