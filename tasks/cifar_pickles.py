"""The original CIFAR python batches, read without running code and checked.

``pickle.load`` calls whatever importable callable a file names (``os.system``
included), so a file under ``--data-dir`` could run code. The python version of CIFAR-10
/ CIFAR-100 (Krizhevsky 2009, "Learning Multiple Layers of Features from Tiny Images";
https://www.cs.toronto.edu/~kriz/cifar.html) holds only dicts, lists, bytes / str, ints
and numpy uint8 arrays, so :func:`load_batch` admits exactly the globals that rebuild a
numpy array (plus ``_codecs.encode`` with latin-1, which protocol-2 pickles written by
Python 3 use for bytes, and numpy's ``_frombuffer`` of protocol 5) and then checks that
the result holds nothing else. Every problem is a one-line
:class:`~fedbench.errors.UserError` naming the file.

A batch is ``{b"data": uint8 (N, 3072), <label key>: [N ints], ...}``, each row 1024 red,
then 1024 green, then 1024 blue pixels of a 32x32 image in row-major order.
"""

from __future__ import annotations

import codecs
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from fedbench.errors import UserError

SIDE = 32
ROW = 3 * SIDE * SIDE  # 3072 bytes per image


def _latin1_encode(text: str, encoding: str) -> bytes:
    """``_codecs.encode`` as protocol-2 pickles use it for bytes: latin-1 only."""
    if encoding != "latin1":
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r} (only latin1 rebuilds bytes)")
    return codecs.encode(text, "latin1")


_RECONSTRUCT = np.ndarray(0).__reduce__()[0]  # numpy's array rebuilder, whatever module it lives in
NDARRAY = object()  # stands for the class numpy.ndarray: an argument of _reconstruct, never called itself


def _reconstruct(cls: object, shape: Any, dtype: Any) -> np.ndarray:
    """numpy's ``_reconstruct`` as a pickled array calls it: an empty array whose data the
    pickle's BUILD step then fills (so an array is never larger than the file's bytes)."""
    if cls is not NDARRAY or tuple(shape) != (0,):
        raise pickle.UnpicklingError("a numpy array rebuilt in an unusual way")
    return _RECONSTRUCT(np.ndarray, (0,), dtype)


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: str) -> np.ndarray:
    """numpy's ``_frombuffer`` as protocol-5 pickles call it: an array over the pickle's bytes."""
    if not isinstance(buf, (bytes, bytearray, pickle.PickleBuffer)) or order not in ("C", "F"):
        raise pickle.UnpicklingError("a numpy array rebuilt in an unusual way")
    return np.frombuffer(buf, dtype=dtype).reshape(shape, order=order)


ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,  # pickles written by numpy 1.x
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,  # numpy 2.x
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,  # protocol 5, numpy 1.x
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,  # protocol 5, numpy 2.x
    ("numpy", "ndarray"): NDARRAY,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
}


class BatchUnpickler(pickle.Unpickler):
    """An unpickler that resolves only :data:`ALLOWED` globals and refuses every other."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which a CIFAR batch never holds")
        return ALLOWED[(module, name)]


def plain_data_problem(obj: Any) -> str | None:
    """What in ``obj`` is not a dict, list, bytes, str, int or numeric numpy array, or None.

    Walks the structure without recursion (a deeply nested list cannot overflow the stack).
    """
    todo = [obj]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            todo.extend(x.keys())
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
        elif isinstance(x, np.ndarray):
            if x.dtype.hasobject or x.dtype.kind not in "biuf":
                return f"a numpy array of dtype {x.dtype} (only numeric arrays are read)"
        elif not isinstance(x, (bytes, str, int)):
            return f"a {type(x).__name__} (only dicts, lists, bytes, str, ints and numeric arrays are read)"
    return None


def load_batch(path: Path, task: str) -> dict:
    """The dict pickled in ``path``, read by :class:`BatchUnpickler` (no code runs)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"{task}: cannot read {path} ({e.strerror or e})") from None
    try:
        obj = BatchUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as e:  # noqa: BLE001 - a foreign or damaged file raises many kinds; all mean "not a batch"
        why = (str(e).splitlines() or [type(e).__name__])[0]
        raise UserError(f"{task}: {path} is not a CIFAR python batch: {why}") from None
    if not isinstance(obj, dict):
        raise UserError(f"{task}: {path} is not a CIFAR python batch: it holds a {type(obj).__name__}, not a dict")
    problem = plain_data_problem(obj)
    if problem is not None:
        raise UserError(f"{task}: {path} is not a CIFAR python batch: it holds {problem}")
    return obj


def entry(batch: dict, key: bytes, path: Path, task: str) -> Any:
    if key not in batch:
        keys = ", ".join(sorted(k.decode("latin1") if isinstance(k, bytes) else str(k) for k in batch))
        raise UserError(f"{task}: {path} has no {key.decode()!r} entry (keys: {keys or 'none'})")
    return batch[key]


def check_labels(labels: Any, n_classes: int, source: str, task: str, classes: str) -> np.ndarray:
    """``labels`` as int64 after checking each is an int in ``0..n_classes - 1`` (the classes
    that ``classes`` names, e.g. a meta file); else a one-line error naming ``source`` and
    the index of the first bad label."""
    if isinstance(labels, np.ndarray) and labels.ndim == 1 and labels.dtype.kind in "iu":
        labels = labels.tolist()
    if not isinstance(labels, list):
        raise UserError(f"{task}: {source}: labels must be a list of integers, got a {type(labels).__name__}")
    for i, v in enumerate(labels):
        if type(v) is not int or not 0 <= v < n_classes:
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
            raise UserError(f"{task}: {source}: labels[{i}] = {shown} is not a class id in 0..{n_classes - 1} "
                            f"(the {n_classes} classes of {classes})")
    return np.asarray(labels, dtype=np.int64)


def batch_arrays(path: Path, label_key: bytes, n_classes: int, task: str,
                 classes: str) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 (N, 3, 32, 32) and int64 labels (N,) of one batch file, checked (labels
    against the ``n_classes`` classes that ``classes`` names)."""
    batch = load_batch(path, task)
    data, labels = entry(batch, b"data", path, task), entry(batch, label_key, path, task)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != ROW:
        shape = f"{data.dtype} array of shape {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise UserError(f"{task}: {path}: 'data' must be a uint8 array of shape (N, {ROW}), got a {shape}")
    y = check_labels(labels, n_classes, str(path), task, classes)
    if len(y) != len(data):
        raise UserError(f"{task}: {path} has {len(data)} images but {len(y)} labels")
    x = data.reshape(-1, 3, SIDE, SIDE)  # (N, 3, 32, 32)
    return (x if x.flags.writeable else x.copy()), y


def label_names(path: Path, key: bytes, task: str) -> list[str]:
    """Class names of a ``meta`` / ``batches.meta`` file: a non-empty list of UTF-8 names."""
    names = entry(load_batch(path, task), key, path, task)
    if not isinstance(names, list) or not names or not all(isinstance(n, (bytes, str)) for n in names):
        raise UserError(f"{task}: {path}: {key.decode()!r} must be a non-empty list of names")
    out = []
    for i, n in enumerate(names):
        try:
            out.append(n.decode("utf-8") if isinstance(n, bytes) else n)
        except UnicodeDecodeError:
            raise UserError(f"{task}: {path}: {key.decode()}[{i}] is not UTF-8 text") from None
    return out
