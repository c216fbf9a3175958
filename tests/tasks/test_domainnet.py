"""domainnet: the DomainNet folder layout (split files), end to end through Experiment.

The fixture is written at test time in the official on-disk format:
``<domain>/<class>/<file>`` plus ``<domain>_train.txt`` / ``<domain>_test.txt`` lines
``<relative path> <label>``. The real PACS set (``../shared/data/pacs``, same layout) runs
through the same loader when present.
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from smoke import shared_data
from fedbench.errors import UserError
from fedbench.runners.cli import main as cli_main
from fedbench.runners.experiment import Experiment
from fedbench.tasks.base import TaskData
from fedbench.tasks.image_domains import DomainNet, DomainNetConfig


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
