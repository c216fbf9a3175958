"""Older result records in the current shape: :func:`upgrade`, the one step between a record
file and every reader.

:func:`fedbench.records.read_record_file` (the one reader of record files) upgrades what it
parsed before validating it, so the leaderboard, the claims report, the sweep and the API
know one shape, :mod:`fedbench.schema`'s. Files on disk are never rewritten: a record keeps
the shape it was written in and its run id (a run is recognised as done by its run id).

Schema version 1 -> 2 (each run field once, the method's version recorded):

* ``run.setting``, ``seed``, ``rounds``, ``roc``, ``capacities``, ``dynamic``,
  ``local_epochs``, ``batch_size``, ``optimizer`` and ``lr`` were written twice, beside
  ``run.run_config``: they move into ``run.run_config`` (where a version-1 record had both,
  with the same value; the run field wins, as version-1 readers read it);
* ``run.variant`` (the leaderboard's row variant) is dropped: it repeated fields of
  ``run_config``, ``method_config`` and ``task_config``, and is derived from them through
  the fields' roles (:func:`fedbench.leaderboard.groups.raw_variant`), as it was written;
* records older still, without ``run.run_config``, get one from their run fields,
  ``clients`` from ``run.n_clients`` and ``per_round`` from ``run.clients_per_round``;
* ``run.method_version`` is 1: every method was at version 1 before versions were recorded.

Only the standard library is imported here (the leaderboard reads records through it).
"""

from __future__ import annotations

from typing import Any

from fedbench.schema import SCHEMA_VERSION, RecordError

__all__ = ["MOVED_RUN_FIELDS", "upgrade"]

#: version-1 ``run`` keys that version 2 keeps in ``run.run_config`` only
MOVED_RUN_FIELDS = ("setting", "seed", "rounds", "roc", "capacities", "dynamic", "local_epochs", "batch_size",
                    "optimizer", "lr")
#: ``run_config`` keys that records without a ``run_config`` hold under another ``run`` key
_OBSERVED_AS_CONFIG = {"clients": "n_clients", "per_round": "clients_per_round"}


def _v1_to_v2(rec: dict) -> dict:
    out = dict(rec, schema_version=2)
    run = rec.get("run")
    if not isinstance(run, dict):  # validation names the problem
        return out
    run = dict(run)
    had_config = isinstance(run.get("run_config"), dict) and bool(run["run_config"])
    config = dict(run["run_config"]) if had_config else {}
    for key in MOVED_RUN_FIELDS:
        if key in run:
            config[key] = run.pop(key)
    if not had_config:
        for key, observed in _OBSERVED_AS_CONFIG.items():
            if observed in run:
                config[key] = run[observed]
    run.pop("variant", None)
    run["run_config"] = config
    run.setdefault("method_version", 1)
    out["run"] = run
    return out


_STEPS = {1: _v1_to_v2}


def upgrade(rec: Any) -> Any:
    """``rec`` (a parsed record file) in the shape of :data:`~fedbench.schema.SCHEMA_VERSION`,
    a new dict (``rec`` is not modified); a current record is returned as it is. A
    version newer than this code reads is a :class:`~fedbench.schema.RecordError`; anything
    that is no record (not a dict, no integer version) is returned as it is, for
    :func:`~fedbench.schema.validate_record` to name the problem."""
    if not isinstance(rec, dict):
        return rec
    version = rec.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        return rec
    if version > SCHEMA_VERSION or version < min(_STEPS, default=SCHEMA_VERSION):
        raise RecordError(f"schema_version: unsupported version {version} (this code reads "
                          f"{min(_STEPS)} to {SCHEMA_VERSION})")
    while version < SCHEMA_VERSION:
        rec = _STEPS[version](rec)
        version = rec["schema_version"]
    return rec
