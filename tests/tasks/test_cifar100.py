"""cifar100: a tiny ``save_to_disk`` CIFAR folder (HF schema ``img`` / ``fine_label``) and
the original ``cifar-100-python`` pickles, end to end through Experiment."""

import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fedbench.errors import UserError
from fedbench.runners.core.experiment import Experiment
from fedbench.tasks.cifar100 import Cifar100, Cifar100Config
from helpers import load_error

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


# ------------------------------------------------------------ what a pickle file may hold
class MarkerOnLoad:
    """Unpickling this object would create ``path`` (standing for any code a pickle can run)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def rewrite(path: Path, edit):
    with open(path, "rb") as f:
        blob = pickle.load(f)
    with open(path, "wb") as f:
        pickle.dump(edit(blob), f)


def one_line_error(root) -> str:
    return load_error(Cifar100(Cifar100Config(data_dir=str(root), model="vit_tiny_test")))


@pytest.mark.parametrize("file", ["train", "test", "meta"])
def test_a_pickle_that_would_run_code_is_refused_without_running_it(tmp_path, file):
    root = write_python_folder(tmp_path / "c")
    marker = tmp_path / "ran"
    rewrite(root / "cifar-100-python" / file, lambda b: {**b, b"extra": [MarkerOnLoad(marker)]})
    msg = one_line_error(root)
    assert not marker.exists()
    assert f"cifar-100-python/{file} is not a CIFAR python batch: it names io.open" in msg


def test_fine_labels_are_checked_against_the_meta_class_list(tmp_path):
    root = write_python_folder(tmp_path / "c")
    folder = root / "cifar-100-python"
    rewrite(folder / "test", lambda b: {**b, b"fine_labels": b[b"fine_labels"][:-1] + [5]})
    assert re.search(r"cifar-100-python/test: labels\[9\] = 5 is not a class id in 0..4 \(the 5 classes of "
                     r".*cifar-100-python/meta\)", one_line_error(root))
    (folder / "meta").unlink()  # without it, CIFAR-100's 100 classes bound the labels
    assert Cifar100(Cifar100Config(data_dir=str(root), model="vit_tiny_test")).load().n_classes == 6
    rewrite(folder / "train", lambda b: {**b, b"fine_labels": [100] + b[b"fine_labels"][1:]})
    assert re.search(r"labels\[0\] = 100 is not a class id in 0..99 \(the 100 classes of CIFAR-100\)",
                     one_line_error(root))
    rewrite(folder / "train", lambda b: {**b, b"data": b[b"data"][:0], b"fine_labels": []})
    assert "cifar-100-python/train holds no images" in one_line_error(root)
