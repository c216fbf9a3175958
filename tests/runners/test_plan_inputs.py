"""``fedbench plan`` checks every input against what the model can hold before building
anything: one line, exit 2 (runners/budget/plan_checks.py)."""

from __future__ import annotations

import json

import pytest

from fedbench.runners.cli.cli import main

CONFIGS = {
    "layers_zero": ({"model_type": "bert", "num_hidden_layers": 0}, "num_hidden_layers must be from 1"),
    "width_string": ({"model_type": "bert", "hidden_size": "wide"}, "hidden_size"),
    "width_float": ({"model_type": "bert", "hidden_size": 768.5}, "hidden_size"),
    "heads_zero": ({"model_type": "bert", "num_attention_heads": 0}, "num_attention_heads must be from 1"),
    "heads_not_dividing": ({"model_type": "bert", "hidden_size": 100, "num_attention_heads": 3},
                           "not a multiple of num_attention_heads"),
    "image_negative": ({"model_type": "vit", "image_size": -3}, "image_size must be from 1"),
    "layers_huge": ({"model_type": "bert", "num_hidden_layers": 10**9}, "num_hidden_layers must be from 1 to 1024"),
}


@pytest.mark.parametrize("case", CONFIGS)
def test_bad_model_configs_are_one_line(case, tmp_path, capsys):
    doc, says = CONFIGS[case]
    (tmp_path / "c.json").write_text(json.dumps(doc))
    assert main(["plan", "--methods", "fedavg", "--model-config", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_nan_width_is_one_line(tmp_path, capsys):
    (tmp_path / "c.json").write_text('{"model_type": "bert", "hidden_size": NaN}')
    assert main(["plan", "--methods", "fedavg", "--model-config", str(tmp_path / "c.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("argv,says", [
    (["--batch-size", str(10**10)], "--batch-size must be an integer from 1 to"),
    (["--n-classes", str(10**11)], "--n-classes must be an integer from 1 to"),
    (["--seq-len", "100000"], "beyond the model's 512 positions"),
    (["--devices", " , "], "names no device class"),
])
def test_bad_options_are_one_line(argv, says, capsys):
    assert main(["plan", "--methods", "fedavg", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_a_catalogue_figure_beyond_reason_is_refused(tmp_path, capsys):
    (tmp_path / "cat.yaml").write_text("big:\n  memory_gb: 1.0e+300\n  tflops: {fp32: 1}\n  uplink_mbps: 1\n"
                                       "  downlink_mbps: 1\n  source: a typo\n")
    assert main(["plan", "--methods", "fedavg", "--devices", "big", "--device-catalog", str(tmp_path / "cat.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "memory_gb must be a number > 0 and <= 1e+06" in err, err


def test_the_largest_open_models_config_is_within_the_stated_limits():
    """plan_checks states its CONFIG_LIMITS are above Llama-3.1-405B's config: that shape passes."""
    from types import SimpleNamespace

    from fedbench.runners.budget.plan_checks import check_model_config

    llama_405b = SimpleNamespace(num_hidden_layers=126, hidden_size=16384, num_attention_heads=128,
                                 intermediate_size=53248, vocab_size=128256, max_position_embeddings=131072)
    check_model_config(llama_405b, "llama-3.1-405b", seq_len=131072, text=True)
