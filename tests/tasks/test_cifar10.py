"""cifar10: tiny ``cifar-10-batches-py`` pickles and a ``save_to_disk`` folder (HF schema
``img`` / ``label``), every Table 1 CNN built from the loaded data, the error messages."""

import pickle
import re
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from fedbench.errors import UserError
from fedbench.tasks.cifar10 import MEAN, STD, Cifar10, Cifar10Config
from helpers import load_error

NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def images(n, seed):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 10
    return rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8), y  # (n, 32, 32, 3), labels


def write_batches(root: Path, per_batch=3, n_test=4) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    files = [(f"data_batch_{i}", per_batch, i) for i in range(1, 6)] + [("test_batch", n_test, 9)]
    for name, n, seed in files:
        x, y = images(n, seed)
        blob = {b"batch_label": name.encode(), b"labels": y.tolist(), b"data": x.transpose(0, 3, 1, 2).reshape(n, -1),
                b"filenames": [b"f.png"] * n}
        with open(folder / name, "wb") as f:
            pickle.dump(blob, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [n.encode() for n in NAMES], b"num_vis": 3072}, f)
    return root


def test_batches_folder_loads_and_normalises(tmp_path):
    data = Cifar10(Cifar10Config(data_dir=str(write_batches(tmp_path)))).load()
    assert (len(data.train), len(data.test), data.n_classes) == (15, 4, 10)
    assert data.info["class_names"] == NAMES and data.info["in_channels"] == 3
    x1, y1 = images(3, 1)  # data_batch_1 comes first
    b = data.train.batch([0, 1, 2])
    assert b["x"].shape == (3, 3, 32, 32) and b["y"].tolist() == y1.tolist()
    expect = (torch.from_numpy(x1).permute(0, 3, 1, 2).float() / 255 - torch.tensor(MEAN)[:, None, None]) \
        / torch.tensor(STD)[:, None, None]
    assert torch.allclose(b["x"], expect, atol=1e-5)
    assert data.train_labels.tolist() == [i % 10 for i in range(3)] * 5


def test_folder_itself_and_missing_batch(tmp_path):
    root = write_batches(tmp_path)
    assert len(Cifar10(Cifar10Config(data_dir=str(root / "cifar-10-batches-py"))).load().test) == 4
    (root / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(UserError, match="lacks data_batch_3"):
        Cifar10(Cifar10Config(data_dir=str(root))).load()


def test_save_to_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    feats = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=NAMES)})
    splits = {}
    for split, n, seed in (("train", 10, 0), ("test", 4, 1)):
        x, y = images(n, seed)
        splits[split] = datasets.Dataset.from_dict({"img": [Image.fromarray(a) for a in x], "label": y.tolist()},
                                                   features=feats)
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "hf"))
    data = Cifar10(Cifar10Config(data_dir=str(tmp_path / "hf"))).load()
    assert (len(data.train), len(data.test), data.info["class_names"]) == (10, 4, NAMES)
    x0 = images(10, 0)[0][0]
    raw = data.train.images[0]  # (3, 32, 32) uint8 as stored
    assert torch.equal(raw, torch.from_numpy(x0).permute(2, 0, 1))


def test_every_arch_builds_from_data(tmp_path):
    data = Cifar10(Cifar10Config(data_dir=str(write_batches(tmp_path)))).load()
    task = Cifar10(Cifar10Config())
    x = data.test.batch([0, 1])["x"]
    fc1 = {"cnn1": 2000, "cnn2": 2000, "cnn3": 1000, "cnn4": 800, "cnn5": 500}
    for arch in task.archs():
        model = task.build_model(data, arch).model
        assert model(x).shape == (2, 10) and model.features(x).shape == (2, 500)
        assert model.fc[0].linear.out_features == fc1[arch] and model.convs[0].in_channels == 3
    assert task.forward(task.build_model(data).model, {"x": x}).shape == (2, 10)
    loss, logits = task.loss(task.build_model(data, "cnn2").model, data.train.batch([0, 1, 2]))
    loss.backward()
    assert logits.shape == (3, 10) and torch.isfinite(loss)


def test_missing_data_messages(tmp_path):
    with pytest.raises(UserError, match="cifar-10-batches-py.*--data-dir"):
        Cifar10(Cifar10Config(data_dir=str(tmp_path))).load()
    with pytest.raises(UserError, match="not a folder"):
        Cifar10(Cifar10Config(data_dir=str(tmp_path / "nowhere"))).load()
    with pytest.raises(UserError) as e:  # tests run with HF_HUB_OFFLINE=1 and an empty cache
        Cifar10(Cifar10Config(hf_id="no-such-org/no-such-cifar")).load()
    assert "\n" not in str(e.value) and "hub cannot be reached" in str(e.value) and "uoft-cs/cifar10" in str(e.value)


# ------------------------------------------------------------ what a batch file may hold
class MarkerOnLoad:
    """Unpickling this object would create ``path`` (standing for any code a pickle can run)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def rewrite(path: Path, edit, protocol=pickle.DEFAULT_PROTOCOL):
    with open(path, "rb") as f:
        blob = pickle.load(f)
    with open(path, "wb") as f:
        pickle.dump(edit(blob), f, protocol=protocol)


def one_line_error(root) -> str:
    return load_error(Cifar10(Cifar10Config(data_dir=str(root))))


@pytest.mark.parametrize("file", ["data_batch_2", "test_batch", "batches.meta"])
def test_a_pickle_that_would_run_code_is_refused_without_running_it(tmp_path, file):
    root = write_batches(tmp_path / "c")
    marker = tmp_path / "ran"
    rewrite(root / "cifar-10-batches-py" / file, lambda b: {**b, b"extra": MarkerOnLoad(marker)})
    msg = one_line_error(root)
    assert not marker.exists()
    assert f"{file} is not a CIFAR python batch: it names io.open" in msg


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_every_pickle_protocol_of_a_real_batch_still_loads(tmp_path, protocol):
    root = write_batches(tmp_path / "c")
    folder = root / "cifar-10-batches-py"
    for name in ("data_batch_1", "test_batch", "batches.meta"):
        rewrite(folder / name, lambda b: b, protocol)
    rewrite(folder / "data_batch_4", lambda b: {**b, b"extra": 1.5})  # a float: no real batch has one
    assert "data_batch_4 is not a CIFAR python batch: it holds a float" in one_line_error(root)
    rewrite(folder / "data_batch_4", lambda b: {k: v for k, v in b.items() if k != b"extra"})
    data = Cifar10(Cifar10Config(data_dir=str(root))).load()
    assert data.train.images[:3].flatten().tolist() == images(3, 1)[0].transpose(0, 3, 1, 2).flatten().tolist()


@pytest.mark.parametrize("edit, expected", [
    (lambda b: {**b, b"labels": b[b"labels"][:-1] + [10]}, r"data_batch_3: labels\[2\] = 10 is not a class id in "
                                                          r"0..9 \(the 10 classes of .*batches.meta\)"),
    (lambda b: {**b, b"labels": [-1] + b[b"labels"][1:]}, r"data_batch_3: labels\[0\] = -1 is not a class id"),
    (lambda b: {**b, b"labels": [10 ** 30] * 3}, r"labels\[0\] = 1000000000000000000000000000000 is not"),
    (lambda b: {**b, b"labels": b[b"labels"][:2]}, "data_batch_3 has 3 images but 2 labels"),
    (lambda b: {**b, b"data": b[b"data"][:, :100]}, r"'data' must be a uint8 array of shape \(N, 3072\), got a uint8 "
                                                    r"array of shape \(3, 100\)"),
    (lambda b: {**b, b"data": b[b"data"].astype(np.int64) + 1000}, "must be a uint8 array"),
    (lambda b: {**b, b"data": np.array([b"x", 1], dtype=object)}, "it holds a numpy array of dtype object"),
    (lambda b: {k: v for k, v in b.items() if k != b"labels"}, "data_batch_3 has no 'labels' entry"),
    (lambda b: [b], "it holds a list, not a dict"),
])
def test_a_malformed_batch_is_one_line_naming_the_file_and_entry(tmp_path, edit, expected):
    root = write_batches(tmp_path / "c")
    rewrite(root / "cifar-10-batches-py" / "data_batch_3", edit)
    assert re.search(expected, one_line_error(root))


def test_without_a_meta_file_labels_are_checked_against_cifar10s_ten_classes(tmp_path):
    root = write_batches(tmp_path / "c")
    folder = root / "cifar-10-batches-py"
    (folder / "batches.meta").unlink()
    rewrite(folder / "test_batch", lambda b: {**b, b"labels": [0, 1, 2, 10]})
    assert re.search(r"test_batch: labels\[3\] = 10 is not a class id in 0..9 \(the 10 classes of CIFAR-10\)",
                     one_line_error(root))


def test_a_bad_meta_file_or_truncated_batch_is_one_line(tmp_path):
    root = write_batches(tmp_path / "c")
    folder = root / "cifar-10-batches-py"
    rewrite(folder / "batches.meta", lambda b: {b"label_names": [b"cat", b"\xff\xfe"]})
    assert re.search(r"batches.meta: label_names\[1\] is not UTF-8 text", one_line_error(root))
    rewrite(folder / "batches.meta", lambda b: {b"label_names": 3})
    assert "'label_names' must be a non-empty list of names" in one_line_error(root)
    (folder / "batches.meta").unlink()
    (folder / "data_batch_5").write_bytes((folder / "data_batch_5").read_bytes()[:200])
    assert "data_batch_5 is not a CIFAR python batch" in one_line_error(root)


# ------------------------------------------------------------ a save_to_disk folder's rows
def write_hf(root: Path, train_images, train_labels, label_feature=None) -> Path:
    """A save_to_disk DatasetDict whose train split holds the given images (PIL images or
    stored ``{"bytes", "path"}`` cells) and labels; the test split is valid."""
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    feats = datasets.Features({"img": datasets.Image(), "label": label_feature or datasets.ClassLabel(names=NAMES)})
    x, y = images(4, 1)
    splits = {"train": datasets.Dataset.from_dict({"img": train_images, "label": train_labels}, features=feats),
              "test": datasets.Dataset.from_dict({"img": [Image.fromarray(a) for a in x], "label": y.tolist()},
                                                 features=feats)}
    datasets.DatasetDict(splits).save_to_disk(str(root))
    return root


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` RGB pixels (and holds almost no data)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def hf_case(case: str):
    from PIL import Image

    datasets = pytest.importorskip("datasets")
    good = [Image.fromarray(a) for a in images(3, 0)[0]]
    bomb = {"bytes": png_header(20_000, 20_000), "path": None}  # beyond twice PIL's limit: PIL refuses to open it
    big = {"bytes": png_header(10_000, 10_000), "path": None}  # PIL would only warn; the size check refuses it
    return {  # case -> (train images, train labels, label feature or None, message)
        "label beyond the names": (good, [0, 1, 10], datasets.Value("int64"),
                                   r"train row 3: label 10 is not a class id in 0\.\.9 \(cifar10's 10 classes\)"),
        "no label (-1)": (good, [0, -1, 2], None,
                          r"train row 2: label -1 is not a class id in 0\.\.9 \(the 10 names of column 'label'\)"),
        "1x1 images": ([Image.new("RGB", (1, 1))] * 3, [0, 1, 2], None,
                       r"train row 1: unreadable image \(a 1x1 image; this dataset's are 32x32\)"),
        "decompression bomb": (good[:2] + [bomb], [0, 1, 2], None,
                               r"train row 3: unreadable image \(Image size \(400000000 pixels\) exceeds limit"),
        "huge header": ([big] + good[1:], [0, 1, 2], None,
                        r"train row 1: unreadable image \(a 10000x10000 image; this dataset's are 32x32\)"),
        "not an image": (good[:1] + [{"bytes": b"GIF89a nope", "path": None}] + good[2:], [0, 1, 2], None,
                         r"train row 2: unreadable image \(cannot identify image file"),
        # datasets cannot load a split saved with no rows (no shards); either way, one line
        "empty split": ([], [], None,
                        r"(the train split of .* has no rows|hf: not a readable save_to_disk DatasetDict)"),
    }[case]


@pytest.mark.parametrize("case", ["label beyond the names", "no label (-1)", "1x1 images", "decompression bomb",
                                  "huge header", "not an image", "empty split"])
def test_every_row_of_a_save_to_disk_folder_is_checked(tmp_path, case):
    imgs, labels, feature, message = hf_case(case)
    root = write_hf(tmp_path / "hf", imgs, labels, feature)
    assert re.search(message, one_line_error(root))


def test_a_broken_save_to_disk_folder_is_one_line(tmp_path):
    root = tmp_path / "hf"
    root.mkdir()
    (root / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    assert one_line_error(root).startswith(f"{root}: not a readable save_to_disk DatasetDict (")
