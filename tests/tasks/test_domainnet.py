"""domainnet: the DomainNet folder layout (split files), end to end through Experiment;
what the folder may hold (paths that stay inside --data-dir, labels of classes.txt, UTF-8
text, image headers read before decoding), each problem one line naming file and line.

The fixture is written at test time in the official on-disk format:
``<domain>/<class>/<file>`` plus ``<domain>_train.txt`` / ``<domain>_test.txt`` lines
``<relative path> <label>``. The real PACS set (``../shared/data/pacs``, same layout) runs
through the same loader when present.
"""

import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from smoke import shared_data
from fedbench.errors import UserError
from fedbench.runners.cli.cli import main as cli_main
from fedbench.runners.core.experiment import Experiment
from fedbench.tasks.base import TaskData
from fedbench.tasks.image_domains import DomainNet, DomainNetConfig
from helpers import load_error


PACS = shared_data("pacs")
DOMAINS = ("clipart", "painting", "real")
CLASSES = ("aircraft_carrier", "airplane", "alarm_clock")


def write_domainnet(root: Path, per_class: int = 6, n_test: int = 2, ext: str = ".jpg") -> Path:
    """Images whose colour encodes the class; the last class has label 2 (dropped by n_classes=2)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for d in DOMAINS:
        lines = {"train": [], "test": []}
        for y, c in enumerate(CLASSES):
            (root / d / c).mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                px = np.clip(rng.normal(60 + 80 * y, 20, size=(20, 20, 3)), 0, 255).astype(np.uint8)
                rel = f"{d}/{c}/{d}_{y:03d}_{i:06d}{ext}"
                Image.fromarray(px).save(root / rel)
                lines["test" if i < n_test else "train"].append(f"{rel} {y}")
        for split, rows in lines.items():
            (root / f"{d}_{split}.txt").write_text("\n".join(rows) + "\n")
    return root


def task(root, **kw):
    return DomainNet(DomainNetConfig(data_dir=str(root), model="vit_tiny_test", img_size=16, **kw))


def test_loader_reads_split_files_with_aligned_domains(tmp_path):
    root = write_domainnet(tmp_path)
    data = task(root).load()
    assert data.domain_names == list(DOMAINS)
    assert len(data.train) == 3 * 3 * 4 and len(data.test) == 3 * 3 * 2
    assert data.n_classes == 3
    for ds, doms in ((data.train, data.train_domains), (data.test, data.test_domains)):
        assert len(doms) == len(ds)
        assert all(p.split("/")[0] == DOMAINS[g] for p, g in zip(ds.paths, doms))
    ex = data.train[0]
    assert ex["x"].shape == (3, 16, 16) and isinstance(ex["y"], int)
    assert data.info["class_names"] == list(CLASSES)
    assert not set(data.train.paths) & set(data.test.paths)


def test_first_n_classes_only(tmp_path):
    data = task(write_domainnet(tmp_path), n_classes=2).load()
    assert data.n_classes == 2
    assert set(data.train_labels.tolist()) == {0, 1}


def test_domain_subset_and_cap(tmp_path):
    data = task(write_domainnet(tmp_path), domains=["real", "clipart"], max_train_per_domain=5).load()
    assert data.domain_names == ["clipart", "real"]
    assert np.bincount(data.train_domains).tolist() == [5, 5]


def test_fedra_domain_setting_reports_per_domain_accuracy(tmp_path):
    root = write_domainnet(tmp_path / "data")
    run = dict(setting="domain", capacities=[12, 8, 6], rounds=2, batch_size=8, out=str(tmp_path / "out"))
    rec, _ = Experiment("fedra", "domainnet", run, task_config=dict(data_dir=str(root), model="vit_tiny_test",
                                                                          img_size=16)).run()
    assert rec["status"] == "ok", rec["error"]
    res = rec["results"]
    assert res["metric_name"] == "top1" and 0.0 <= res["final"] <= 1.0
    assert set(res["per_domain"]) == set(DOMAINS)
    assert res["extra"]["domain_mean"] == pytest.approx(np.mean(list(res["per_domain"].values())))
    assert rec["run"]["n_clients"] == 3
    by_tier = rec["cost"]["tflops_per_step"]["by_tier"]  # tiers = capacities 6 < 8 < 12 blocks
    assert by_tier["0"]["mean"] < by_tier["1"]["mean"] < by_tier["2"]["mean"]


def test_fedavg_domain_dirichlet_setting(tmp_path):
    root = write_domainnet(tmp_path / "data", per_class=8)
    run = dict(setting="domain+dir(0.5)x2", rounds=1, per_round=3, batch_size=8, measure_flops=False,
               out=str(tmp_path / "out"))
    rec, _ = Experiment("fedavg", "domainnet", run, task_config=dict(data_dir=str(root), model="mixer_tiny_test",
                                                                           img_size=16)).run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["run"]["n_clients"] == 6


def test_overlapping_split_files_are_rejected(tmp_path):
    root = write_domainnet(tmp_path)
    train = (root / "real_train.txt").read_text().splitlines()
    (root / "real_test.txt").write_text("\n".join(train[:1]) + "\n")
    with pytest.raises(UserError, match="share 1 example"):
        task(root).load()


def test_missing_data_is_one_clear_line(tmp_path, capsys):
    with pytest.raises(UserError) as e:
        task(tmp_path / "nowhere").load()
    msg = str(e.value)
    assert "\n" not in msg and "--data-dir" in msg and "<domain>/<class>/<image>" in msg
    code = cli_main(["run", "--method", "fedavg", "--task", "domainnet", "--model", "vit_tiny_test",
                     "--rounds", "1", "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "ai.bu.edu" in err[0]


@pytest.mark.parametrize("split,line", [("train", 3), ("test", 5)])
def test_every_listed_image_is_checked_before_training(tmp_path, split, line):
    root = write_domainnet(tmp_path)
    split_file = root / f"painting_{split}.txt"
    rel = split_file.read_text().splitlines()[line - 1].rsplit(maxsplit=1)[0]
    (root / rel).unlink()
    with pytest.raises(UserError, match=rf"painting_{split}\.txt line {line} names '{rel}', which is not a file"):
        task(root).load()


@pytest.mark.parametrize("damage", ["truncated", "not an image", "empty"])
def test_unreadable_image_names_the_file(tmp_path, damage):
    root = write_domainnet(tmp_path)
    data = task(root).load()
    path = root / data.train.paths[5]
    blob = path.read_bytes()
    path.write_bytes({"truncated": blob[: len(blob) // 2], "not an image": b"GIF89a garbage", "empty": b""}[damage])
    with pytest.raises(UserError, match=rf"unreadable image {path}: "):
        data.train[5]
    with pytest.raises(UserError, match=rf"unreadable image {path}: "):
        data.train.subset([4, 5])[1]


@pytest.mark.parametrize("model", ["vit_tiny_test", "mixer_tiny_test"])
def test_backbone_fixed_head_follows_the_run_seed(tmp_path, model):
    data = TaskData(train=None, test=None, train_labels=np.zeros(1, np.int64), n_classes=5)
    t = DomainNet(DomainNetConfig(data_dir=str(tmp_path), model=model, img_size=16))
    states = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        bundle = t.build_model(data)
        states.append(bundle.model.state_dict())
    assert bundle.model.head.out_features == 5
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0] if not k.startswith("head."))
    assert not torch.equal(states[0]["head.weight"], states[1]["head.weight"])
    with pytest.raises(UserError, match="arch 'large'"):
        t.build_model(data, arch="large")


# ------------------------------------------------------------------ the real PACS set
needs_pacs = pytest.mark.skipif(not PACS.is_dir(), reason="../shared/data/pacs not present")


@needs_pacs
def test_pacs_through_the_domainnet_loader():
    data = DomainNet(DomainNetConfig(data_dir=str(PACS), model="vit_tiny_test")).load()
    assert data.domain_names == ["art_painting", "cartoon", "photo", "sketch"]
    assert (len(data.train), len(data.test)) == (8003, 1988)  # README counts
    assert data.n_classes == 7 and data.info["class_names"][5] == "house"
    assert np.bincount(data.test_domains).tolist() == [407, 466, 331, 784]


@needs_pacs
@pytest.mark.slow
def test_pacs_fedra_rounds(tmp_path):
    run = dict(setting="domain", capacities=[12, 8, 6, 3], rounds=2, out=str(tmp_path))
    rec, _ = Experiment("fedra", "domainnet", run, task_config=dict(data_dir=str(PACS), model="vit_tiny_test",
                                                                          max_train_per_domain=600)).run()
    assert rec["status"] == "ok", rec["error"]
    res = rec["results"]
    assert set(res["per_domain"]) == {"art_painting", "cartoon", "photo", "sketch"}
    assert all(0.0 <= v <= 1.0 for v in res["per_domain"].values())


# ------------------------------------------------------------------ what the folder may hold
def one_line_error(root, **kw) -> str:
    return load_error(task(root, **kw))


def set_line(split_file: Path, n: int, text: str) -> None:
    lines = split_file.read_text().splitlines()
    lines[n - 1] = text
    split_file.write_text("\n".join(lines) + "\n")


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` RGB pixels (and holds almost no data)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


# ------------------------------------------------------------------ paths leaving the data folder
@pytest.mark.parametrize("how", ["dot-dot", "absolute", "symlinked file", "symlinked folder"])
def test_a_split_file_path_leading_outside_the_data_folder_is_refused(tmp_path, how):
    root = write_domainnet(tmp_path / "data")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    real = root / "real" / "airplane"
    (outside / "x.jpg").write_bytes(next(real.iterdir()).read_bytes())  # a valid image, just not ours
    rel = {"dot-dot": "real/../../elsewhere/x.jpg", "absolute": str(outside / "x.jpg"),
           "symlinked file": "real/airplane/link.jpg", "symlinked folder": "real/escape/x.jpg"}[how]
    if how == "symlinked file":
        os.symlink(outside / "x.jpg", real / "link.jpg")
    if how == "symlinked folder":
        os.symlink(outside, root / "real" / "escape")
    set_line(root / "real_train.txt", 3, f"{rel} 1")
    msg = one_line_error(root)
    assert msg == f"domainnet: {root / 'real_train.txt'} line 3 names {rel!r}, which is outside the data folder {root}"


def test_symlinks_are_judged_by_where_they_lead(tmp_path):
    root = write_domainnet(tmp_path / "data")
    lines = (root / "real_train.txt").read_text().splitlines()
    first, second, third = (line.rsplit(maxsplit=1)[0] for line in lines[:3])
    os.symlink(root / Path(first).parent, root / "real" / "alias")  # an alias folder inside root
    os.symlink(tmp_path, root / "real" / "up")  # leads out of root (and back in through data/)
    set_line(root / "real_train.txt", 1, f"real/alias/{Path(first).name} 0")
    set_line(root / "real_train.txt", 2, f"real/../{second} 0")  # '..' that stays inside
    set_line(root / "real_train.txt", 3, f"real/up/data/{third} 0")  # out and back in: inside
    assert len(task(root).load().train) == 3 * 3 * 4
    (tmp_path / "x.jpg").write_bytes((root / third).read_bytes())
    set_line(root / "real_train.txt", 3, "real/up/x.jpg 0")
    assert "line 3 names 'real/up/x.jpg', which is outside the data folder" in one_line_error(root)
    os.symlink(root / "clipart", root / "real" / "airplane" / "x.jpg")  # a folder, not a file
    set_line(root / "real_train.txt", 3, "real/airplane/x.jpg 1")
    assert "line 3 names 'real/airplane/x.jpg', which is not a file under" in one_line_error(root)


# ------------------------------------------------------------------ labels and text files
def test_labels_are_checked_against_classes_txt(tmp_path):
    root = write_domainnet(tmp_path / "data")
    (root / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    set_line(root / "painting_test.txt", 2, "painting/airplane/painting_001_000000.jpg 99")
    assert one_line_error(root) == (f"{root / 'painting_test.txt'} line 2: label 99 is not a class id in 0..2 "
                                    f"(the 3 classes of {root / 'classes.txt'})")
    set_line(root / "painting_test.txt", 2, "painting/airplane/painting_001_000000.jpg -1")
    assert one_line_error(root).startswith(f"{root / 'painting_test.txt'} line 2: label -1 is not a class id")
    (root / "classes.txt").unlink()  # no class list: a label is still bounded
    set_line(root / "painting_test.txt", 2, f"painting/airplane/painting_001_000000.jpg {10 ** 30}")
    assert one_line_error(root).endswith("is not a class id in 0..99999 (below 100000 without a classes.txt)")


@pytest.mark.parametrize("file", ["clipart_train.txt", "classes.txt"])
def test_a_split_or_class_file_that_is_not_utf8_is_one_line(tmp_path, file):
    root = write_domainnet(tmp_path / "data")
    (root / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    path = root / file
    path.write_bytes(path.read_bytes().replace(b"\n", b"\n\xff\xfe", 1))
    assert one_line_error(root).startswith(f"{path} line 2: not UTF-8 text")


def test_a_huge_line_is_echoed_short(tmp_path):
    root = write_domainnet(tmp_path / "data")
    set_line(root / "real_test.txt", 1, "x" * 100_000)
    msg = one_line_error(root)
    assert msg.startswith(f"{root / 'real_test.txt'} line 1: expected '<relative path> <integer label>'")
    assert len(msg) < 400


# ------------------------------------------------------------------ images decoded while training
@pytest.mark.parametrize("side", [10_000, 100_000])
def test_a_decompression_bomb_header_is_refused_before_decoding(tmp_path, side):
    root = write_domainnet(tmp_path / "data", ext=".png")
    data = task(root).load()
    path = root / data.train.paths[3]
    path.write_bytes(png_header(side, side))
    with pytest.raises(UserError) as e:
        data.train[3]
    msg = str(e.value)
    assert msg.startswith(f"unreadable image {path}: ") and "\n" not in msg
    assert f"{side}x{side}" in msg or "decompression bomb" in msg
    assert msg.endswith(f"(listed at {root / 'clipart_train.txt'} line 4)")


def test_an_image_that_fails_while_training_ends_the_run_failed_naming_its_line(tmp_path):
    root = write_domainnet(tmp_path / "data", per_class=4)
    bad = (root / "real_train.txt").read_text().splitlines()[1].rsplit(maxsplit=1)[0]
    (root / bad).write_bytes(b"GIF89a not really")  # a file, so the listing check passes
    run = dict(setting="domain", rounds=1, batch_size=4, measure_flops=False, out=str(tmp_path / "out"))
    rec, _ = Experiment("fedavg", "domainnet", run, task_config=dict(data_dir=str(root), model="vit_tiny_test",
                                                                           img_size=16)).run()
    assert rec["status"] == "failed"
    assert rec["error"].startswith(f"unreadable image {root / bad}: ")
    assert rec["error"].endswith(f"(listed at {root / 'real_train.txt'} line 2)")
