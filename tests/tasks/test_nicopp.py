"""nicopp: a NICO++-layout folder (``<domain>/<class>/<file>``, no split files) through
the shared multi-domain loader: seeded split, aligned domains, end-to-end rounds."""

import os
from pathlib import Path

import numpy as np
import torch
import pytest

from fedbench.errors import UserError
from fedbench.runners.core.experiment import Experiment
from fedbench.tasks.image_domains import Nicopp, NicoppConfig

STYLES = ("autumn", "dim", "grass", "outdoor", "rock", "water")
CLASSES = ("bear", "bicycle", "bird")


def write_nicopp(root: Path, per_class: int = 5) -> Path:
    from PIL import Image

    rng = np.random.default_rng(1)
    for d in STYLES:
        for y, c in enumerate(CLASSES):
            (root / d / c).mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                px = rng.integers(0, 256, size=(24, 18, 3), dtype=np.uint8)  # not square: resized anyway
                Image.fromarray(px).save(root / d / c / f"{i}.{'png' if i % 2 else 'jpg'}")
    (root / "autumn" / "bear" / "notes.txt").write_text("not an image")
    return root


def load(root, **kw):
    return Nicopp(NicoppConfig(data_dir=str(root), model="vit_tiny_test", img_size=16, **kw)).load()


def test_seeded_split_is_fixed_disjoint_and_per_cell(tmp_path):
    root = write_nicopp(tmp_path)
    a = load(root)
    np.random.seed(123)
    torch.manual_seed(123)  # the run's global seeding does not move the split
    b = load(root)
    assert a.train.paths == b.train.paths and a.test.paths == b.test.paths
    assert not set(a.train.paths) & set(a.test.paths)
    assert len(a.test) == 6 * 3 * round(0.2 * 5) and len(a.train) == 6 * 3 * 4
    assert a.domain_names == list(STYLES) and a.n_classes == 3
    assert all(p.split("/")[0] == STYLES[g] for p, g in zip(a.train.paths, a.train_domains))
    assert all(p.split("/")[1] == CLASSES[y] for p, y in zip(a.train.paths, a.train_labels))
    other = load(root, split_seed=5)
    assert other.test.paths != a.test.paths


def test_domain_setting_runs_with_mixer(tmp_path):
    root = write_nicopp(tmp_path / "data")
    run = dict(setting="domain", rounds=1, batch_size=8, measure_flops=False, out=str(tmp_path / "out"))
    rec, _ = Experiment("fedavg", "nicopp", run, task_config=dict(data_dir=str(root), model="mixer_tiny_test",
                                                                        img_size=16)).run()
    assert rec["status"] == "ok", rec["error"]
    assert set(rec["results"]["per_domain"]) == set(STYLES)
    assert rec["run"]["n_clients"] == 6


def test_unknown_domain_and_empty_folder(tmp_path):
    root = write_nicopp(tmp_path / "data")
    with pytest.raises(UserError, match="domain 'snow' not in"):
        load(root, domains=["snow"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="nicopp: no domain folders"):
        load(tmp_path / "empty")


def test_split_files_name_a_missing_image(tmp_path):
    """NICO++ folders may come with split files too: every listed image is checked."""
    root = write_nicopp(tmp_path / "data")
    for d in STYLES:
        for split in ("train", "test"):
            rows = [f"{d}/{c}/{i}.{'png' if i % 2 else 'jpg'} {y}" for y, c in enumerate(CLASSES)
                    for i in (range(4) if split == "train" else [4])]
            (root / f"{d}_{split}.txt").write_text("\n".join(rows) + "\n")
    (root / "rock" / "bird" / "2.jpg").unlink()
    with pytest.raises(UserError, match=r"nicopp: .*rock_train\.txt line 11 names 'rock/bird/2\.jpg'"):
        load(root)


def test_corrupt_image_found_while_training_names_the_file(tmp_path):
    root = write_nicopp(tmp_path / "data")
    (root / "dim" / "bird" / "3.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    data = load(root)
    i = data.train.paths.index("dim/bird/3.png")
    with pytest.raises(UserError, match=r"unreadable image .*dim/bird/3\.png"):
        data.train[i]


def test_a_scanned_image_linked_from_outside_is_refused(tmp_path):
    root = write_nicopp(tmp_path / "data")
    (tmp_path / "secret.png").write_bytes((root / "dim" / "bird" / "1.png").read_bytes())
    os.symlink(tmp_path / "secret.png", root / "dim" / "bird" / "9.png")
    with pytest.raises(UserError, match=rf"nicopp: the scan of {root} names 'dim/bird/9\.png', which is outside"):
        load(root)
