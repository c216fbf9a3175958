"""fashion_mnist: tiny IDX files in the original format (plain and gzipped), the Table 1
CNNs on 1- and 3-channel inputs, the error messages, and the real files (slow)."""

import gzip
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from fedbench.errors import UserError
from fedbench.tasks.base import TaskData
from fedbench.tasks.cnn import ARCHS, TABLE1, cnn
from fedbench.tasks.fashion_mnist import FashionMnist, FashionMnistConfig, read_idx

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "fashion-mnist"
REAL = REAL if REAL.is_dir() else Path("/work/shared/data/fashion-mnist")


def idx_bytes(a: np.ndarray) -> bytes:
    """IDX: 0, 0, type 0x08 (uint8), n_dims, then big-endian int32 dims, then the data."""
    return bytes([0, 0, 8, a.ndim]) + struct.pack(f">{a.ndim}i", *a.shape) + a.astype(np.uint8).tobytes()


def write_idx_folder(root: Path, gz: bool, n_train=12, n_test=5) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = np.arange(n, dtype=np.uint8) % 10
        for name, a in ((f"{prefix}-images-idx3-ubyte", x), (f"{prefix}-labels-idx1-ubyte", y)):
            data = idx_bytes(a)
            if gz:
                (root / f"{name}.gz").write_bytes(gzip.compress(data))
            else:
                (root / name).write_bytes(data)
    return root


@pytest.mark.parametrize("gz", [False, True])
def test_idx_folder_loads_pads_and_normalises(tmp_path, gz):
    root = write_idx_folder(tmp_path / "fm", gz)
    data = FashionMnist(FashionMnistConfig(data_dir=str(root))).load()
    assert (len(data.train), len(data.test), data.n_classes) == (12, 5, 10)
    assert data.info["in_channels"] == 1 and data.info["img_size"] == 32
    assert data.train_labels.tolist() == [i % 10 for i in range(12)]
    b = data.train.batch([0, 3])
    assert b["x"].shape == (2, 1, 32, 32) and b["y"].tolist() == [0, 3]
    raw = read_idx(next(root.glob("train-images-idx3-ubyte*")), 2051)  # (12, 28, 28)
    inner = b["x"][0, 0, 2:30, 2:30]
    assert torch.allclose(inner, (torch.from_numpy(raw[0].copy()).float() / 255 - 0.2860) / 0.3530, atol=1e-5)
    border = b["x"][0, 0, :2]  # padded background = pixel 0 after normalisation
    assert torch.allclose(border, torch.full_like(border, (0 - 0.2860) / 0.3530))


def test_torchvision_raw_layout(tmp_path):
    write_idx_folder(tmp_path / "FashionMNIST" / "raw", gz=True)
    assert len(FashionMnist(FashionMnistConfig(data_dir=str(tmp_path))).load().train) == 12


def test_build_model_every_arch_without_load(tmp_path):
    data = FashionMnist(FashionMnistConfig(data_dir=str(write_idx_folder(tmp_path, False)))).load()
    task = FashionMnist(FashionMnistConfig())  # a fresh task: build_model must not need load()
    assert task.archs() == ("cnn1", "cnn2", "cnn3", "cnn4", "cnn5")
    x = data.train.batch([0, 1, 2])["x"]
    for arch in task.archs():
        bundle = task.build_model(data, arch)
        k = int(arch[3:])
        assert bundle.model(x).shape == (3, 10)
        assert bundle.model.hidden(x).shape == (3, TABLE1[k][1]) and bundle.model.features(x).shape == (3, 500)
        assert bundle.layer_map("default") == {0: ["fc.0.linear"], 1: ["fc.1.linear"]}
        assert bundle.head_modules == ["head"] and bundle.model.convs[0].in_channels == 1
    assert task.build_model(data).model.fc[0].linear.out_features == 2000  # None = cnn1


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("channels", [1, 3])
def test_cnn_shapes(arch, channels):
    k = int(arch[3:])
    m = cnn(k, channels, 7)
    x = torch.randn(4, channels, 32, 32)
    assert m(x).shape == (4, 7) and m.features(x).shape == (4, 500)
    assert torch.equal(m(x), m.head(m.features(x)))
    assert m.convs[3].out_channels == TABLE1[k][0]


def test_cnn_sizes_match_table1():
    """Table 1 model sizes (MB of float32, 32x32 RGB, 10 classes): CNN-1..3 exactly; CNN-4's
    3.81 cannot come from its listed widths (see tasks/cnn.py)."""
    mib = {k: sum(p.numel() for p in cnn(k, 3, 10).parameters()) * 4 / 2**20 for k in TABLE1}
    assert [round(mib[k], 2) for k in (1, 2, 3)] == [10.00, 6.92, 5.04]
    assert abs(mib[5] - 2.55) < 0.01


def test_unknown_arch_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cnn6.*cnn1"):
        FashionMnist(FashionMnistConfig()).build_model(TaskData(None, None, np.zeros(1), 10, info={
            "in_channels": 1, "img_size": 32}), "cnn6")
    with pytest.raises(UserError):
        FashionMnistConfig(model="resnet")


def test_bad_idx_names_the_file(tmp_path):
    root = write_idx_folder(tmp_path, gz=False)
    bad = root / "t10k-labels-idx1-ubyte"
    bad.write_bytes(idx_bytes(np.zeros((3, 2), np.uint8)))  # 2 dims: magic 2050
    with pytest.raises(UserError) as e:
        FashionMnist(FashionMnistConfig(data_dir=str(root))).load()
    assert str(bad) in str(e.value) and "2049" in str(e.value) and "\n" not in str(e.value)
    bad.write_bytes(idx_bytes(np.zeros(5, np.uint8))[:-1])  # one label short
    with pytest.raises(UserError, match="truncated"):
        FashionMnist(FashionMnistConfig(data_dir=str(root))).load()
    bad.unlink()
    with pytest.raises(UserError, match="lacks t10k-labels-idx1-ubyte"):
        FashionMnist(FashionMnistConfig(data_dir=str(root))).load()


def test_missing_data_messages(tmp_path):
    with pytest.raises(UserError, match="train-images-idx3-ubyte.gz.*--data-dir"):
        FashionMnist(FashionMnistConfig(data_dir=str(tmp_path))).load()
    with pytest.raises(UserError) as e:  # tests run with HF_HUB_OFFLINE=1 and an empty cache
        FashionMnist(FashionMnistConfig(hf_id="no-such-org/no-such-fashion")).load()
    assert "\n" not in str(e.value) and "hub cannot be reached" in str(e.value)


@pytest.mark.slow
@pytest.mark.skipif(not (REAL / "train-images-idx3-ubyte.gz").is_file(), reason="no ../shared/data/fashion-mnist")
def test_real_files():
    task = FashionMnist(FashionMnistConfig(data_dir=str(REAL)))
    data = task.load()
    assert (len(data.train), len(data.test), data.n_classes) == (60000, 10000, 10)
    assert np.bincount(data.train_labels).tolist() == [6000] * 10
    x = data.train.images[:, :, 2:30, 2:30].float() / 255  # the unpadded pixels
    assert abs(x.mean().item() - 0.2860) < 1e-3 and abs(x.std().item() - 0.3530) < 1e-3
    b = data.test.batch(np.arange(8))
    assert task.build_model(data, "cnn5").model(b["x"]).shape == (8, 10)


def fm_error(root) -> str:
    with pytest.raises(UserError) as e:
        FashionMnist(FashionMnistConfig(data_dir=str(root))).load()
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_corrupt_gzip_is_one_line_naming_the_file(tmp_path):
    root = write_idx_folder(tmp_path / "fm", gz=True, n_train=40)
    path = root / "train-images-idx3-ubyte.gz"
    blob = bytearray(path.read_bytes())
    blob[12:32] = bytes(b ^ 0x5A for b in blob[12:32])  # damage the first deflate block, keep the gzip header
    path.write_bytes(bytes(blob))
    assert fm_error(root).startswith(f"fashion_mnist: cannot read {path} (")


@pytest.mark.parametrize("dims,expected", [
    ((-1, 28, 28), r"header dims \(-1, 28, 28\) are not those of a Fashion-MNIST file"),
    ((2 ** 30, 28, 28), r"header dims \(1073741824, 28, 28\) are not those of a Fashion-MNIST file \(at most "
                        r"1073741824 bytes\)"),
])
def test_a_header_announcing_an_impossible_size_is_refused_before_reading_on(tmp_path, dims, expected):
    root = write_idx_folder(tmp_path / "fm", gz=True)
    path = root / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(bytes([0, 0, 8, 3]) + struct.pack(">3i", *dims) + b"\0" * 64))
    assert re.search(expected, fm_error(root))


def test_labels_outside_the_ten_classes_name_the_file_and_item(tmp_path):
    root = write_idx_folder(tmp_path / "fm", gz=False)
    y = np.arange(5, dtype=np.uint8) % 10
    y[3] = 200
    (root / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(y))
    assert fm_error(root) == (f"fashion_mnist: {root / 't10k-labels-idx1-ubyte'}: labels[3] = 200 is not a class id "
                              f"in 0..9 (Fashion-MNIST's 10 classes)")


@pytest.mark.parametrize("shape", [(12, 1, 1), (0, 28, 28), (12, 28, 27)])
def test_images_that_are_not_fashion_mnist_sized_are_refused(tmp_path, shape):
    root = write_idx_folder(tmp_path / "fm", gz=False)
    (root / "train-images-idx3-ubyte").write_bytes(idx_bytes(np.zeros(shape, np.uint8)))
    assert fm_error(root) == (f"fashion_mnist: {root / 'train-images-idx3-ubyte'} holds {shape[0]} images of "
                              f"{shape[1]}x{shape[2]} pixels; Fashion-MNIST's are 28x28, and a split needs at least one")
