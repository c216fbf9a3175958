"""cifar100: a tiny ``save_to_disk`` CIFAR folder (HF schema ``img`` / ``fine_label``) and
the original ``cifar-100-python`` pickles, end to end through Experiment."""

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from fedbench.errors import UserError
from fedbench.runners.experiment import Experiment
from fedbench.tasks.cifar100 import Cifar100, Cifar100Config

NAMES = ["apple", "aquarium_fish", "baby", "bear", "beaver"]


def images(n, seed):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % len(NAMES)
    x = np.clip(rng.normal(40 + 40 * y[:, None, None, None], 25, size=(n, 32, 32, 3)), 0, 255).astype(np.uint8)
    return x, y  # (n, 32, 32, 3) uint8, labels


def write_save_to_disk(root: Path) -> Path:
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    feats = datasets.Features({"img": datasets.Image(), "fine_label": datasets.ClassLabel(names=NAMES),
                               "coarse_label": datasets.Value("int64")})
    splits = {}
    for split, n, seed in (("train", 40, 0), ("test", 15, 1)):
        x, y = images(n, seed)
        splits[split] = datasets.Dataset.from_dict(
            {"img": [Image.fromarray(a) for a in x], "fine_label": y.tolist(), "coarse_label": [0] * n},
            features=feats)
    datasets.DatasetDict(splits).save_to_disk(str(root))
    return root


def write_python_folder(root: Path) -> Path:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    for split, n, seed in (("train", 20, 2), ("test", 10, 3)):
        x, y = images(n, seed)
        blob = {b"data": x.transpose(0, 3, 1, 2).reshape(n, -1), b"fine_labels": y.tolist(), b"coarse_labels": [0] * n}
        with open(folder / split, "wb") as f:
            pickle.dump(blob, f)
    with open(folder / "meta", "wb") as f:
        pickle.dump({b"fine_label_names": [n.encode() for n in NAMES]}, f)
    return root


def test_save_to_disk_fedavg_two_rounds(tmp_path):
    root = write_save_to_disk(tmp_path / "cifar")
    run = dict(setting="iid", clients=3, per_round=3, rounds=2, batch_size=16, measure_flops=False,
               out=str(tmp_path / "out"))
    rec, _ = Experiment("fedavg", "cifar100", run, task_config=dict(data_dir=str(root), model="vit_tiny_test",
                                                                          img_size=16)).run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["results"]["metric_name"] == "top1" and 0.0 <= rec["results"]["final"] <= 1.0
    assert rec["results"]["per_domain"] is None


def test_python_folder_upscales_and_normalises(tmp_path):
    task = Cifar100(Cifar100Config(data_dir=str(write_python_folder(tmp_path)), model="vit_tiny_test", img_size=48))
    data = task.load()
    assert (len(data.train), len(data.test), data.n_classes) == (20, 10, 5)
    assert data.info["class_names"] == NAMES
    b = data.train.batch([0, 1, 2])
    assert b["x"].shape == (3, 3, 48, 48) and b["x"].dtype == torch.float32
    assert b["y"].tolist() == [0, 1, 2]
    native = Cifar100(Cifar100Config(data_dir=str(tmp_path), model="vit_tiny_test")).load()  # 32 px: no resize
    x = native.train.batch([0])["x"][0]  # (3, 32, 32)
    raw = native.train.images[0].float() / 255  # ImageNet statistics for the tiny model
    expect = (raw - torch.tensor([0.485, 0.456, 0.406])[:, None, None]) / torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    assert torch.allclose(x, expect, atol=1e-6)
    sub = data.train.subset([3, 4])
    assert len(sub) == 2 and sub.batch([0])["y"].item() == 3


def test_pretrained_vit_uses_its_own_statistics_and_size():
    task = Cifar100(Cifar100Config())
    size, mean, std = task.image_settings()
    assert (size, mean, std) == (224, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def test_missing_data_messages(tmp_path):
    with pytest.raises(UserError, match="uoft-cs/cifar100.*--data-dir"):
        Cifar100(Cifar100Config(data_dir=str(tmp_path), model="vit_tiny_test")).load()
    with pytest.raises(UserError) as e:  # tests run with HF_HUB_OFFLINE=1 and an empty cache
        Cifar100(Cifar100Config(model="vit_tiny_test", hf_id="no-such-org/no-such-cifar")).load()
    assert "\n" not in str(e.value) and "hub cannot be reached" in str(e.value)
