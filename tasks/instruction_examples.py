"""Instruction examples as read from record files: the fields, a content digest, which rows
can be trained on, and the seeded held-out split of a dataset that has no test split
(duplicates kept on one side).

Real data has empty texts that are valid: Dolly's ``context`` is empty in most rows, a few
of its ``response`` fields are empty, Natural Instructions has empty inputs and empty
``targets`` lists. A row is refused (:func:`row_problem`: one line naming file and line)
only when it cannot be trained on at all: no text anywhere (empty prompt and empty
response) or a field of the wrong type. A row with a prompt but an empty response teaches
and scores nothing (Rouge-L against no reference): it is dropped and counted
(:func:`drop_empty_responses`), and the task warns with the count."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from fedbench.tasks.record_files import json_type


@dataclass(frozen=True)
class Example:
    instruction: str
    context: str
    response: str
    category: str

    def digest(self) -> str:
        blob = "\x1f".join((self.instruction, self.context, self.response))
        return hashlib.blake2b(blob.encode("utf-8"), digest_size=12).hexdigest()


def first_value(row: dict, names: tuple[str, ...]):
    """The first of ``names`` that ``row`` has (not null); a list stands for its first item
    (Natural Instructions' ``targets``), an empty list for an empty text."""
    for n in names:
        if n in row and row[n] is not None:
            v = row[n]
            return (v[0] if v else "") if isinstance(v, list) else v
    return None


def row_problem(row: dict, fields: dict[str, tuple[str, ...]]) -> str | None:
    """Why a record cannot be trained on, or None. ``fields`` maps ``instruction``,
    ``context``, ``response`` (and ``category``) to the names the file may use. The
    instruction and response must be present as strings (empty allowed); the row is refused
    only if the instruction, context and response are all empty (no text at all)."""
    texts = {}
    for key in ("instruction", "context", "response"):
        names = fields[key]
        value = first_value(row, names)
        if value is None and key != "context":
            return f"missing field {names[0]!r}" + (f" (or {', '.join(map(repr, names[1:]))})" if names[1:] else "")
        if value is not None and not isinstance(value, str):
            return f"field {next(n for n in names if n in row)!r} must be a string, got {json_type(value)}"
        texts[key] = (value or "").strip()
    if not any(texts.values()):
        return (f"no text: {fields['instruction'][0]!r}, {fields['context'][0]!r} and {fields['response'][0]!r} "
                f"are all empty (a row with only an empty response is dropped, not refused)")
    return None


def drop_empty_responses(examples: list[Example]) -> tuple[list[Example], int]:
    """(the examples with a response, how many had none and were dropped)."""
    kept = [e for e in examples if e.response]
    return kept, len(examples) - len(kept)


def holdout(examples: list[Example], fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """Seeded train/test split over distinct examples (duplicates stay on one side)."""
    groups: dict[str, list[int]] = {}
    for i, ex in enumerate(examples):
        groups.setdefault(ex.digest(), []).append(i)
    keys = sorted(groups)
    order = np.random.default_rng([seed, 11]).permutation(len(keys))
    n_test = max(1, int(round(fraction * len(keys))))
    test_keys = {keys[i] for i in order[:n_test]}
    train = [ex for ex in examples if ex.digest() not in test_keys]  # file order kept
    test = [ex for ex in examples if ex.digest() in test_keys]
    return train, test
