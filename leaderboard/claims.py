"""The seed papers' claims, read from ``leaderboard/claims/<paper>.yaml``, tested against
the committed records (``fedbench claims``; the report is :mod:`~fedbench.leaderboard.claims_report`).

A claim is "A beats B under setting S" as one cell pair of a paper's table: method A (the
paper's), method B (a baseline or ablation), a resource label (RoC) and federation, one
data setting, and the two figures the paper prints (``null`` where our copy of the paper
does not show a legible number; the claim's direction then comes from the block's
``claim``). A claim file holds blocks, one per paper table::

    paper: fed_hello
    title: Fed-HeLLo (...)
    blocks:
      - table: Table III (LEDGAR, BERT-base, Macro-F1)
        task: ledgar                 # the task whose records test it
        method: fed_hello            # A
        columns: {iid: IID, 20/1.0: 20/1.0}  # our setting -> the paper's column
        groups:
          - roc: "6:3:1"             # the records' resource label
            where: {clients: 10}     # optional: run/method fields the rows must have (method.<name>: where the method has it)
            figures: {fed_hello: [67.00, 65.58], straggler: [56.82, 51.05]}
            notes: {straggler: "..."}  # optional: about one method's row (shown on its claims only)
        explained_by:                # optional: why B's row differs from ours (printed under its claims)
          flexlora:
            kind: code reading       # or: measurement (then ablations are required)
            text: "..."
            measured_by: benchmarks/x.yaml  # optional: the preset that measures it
            ablations:               # optional: arms measured from the records (claims_ablation)
              - {factor: "...", settings: [iid], arm: {method.server_rule: authors_code}, methods: [flexlora],
                 command: "..."}  # methods: the arm's methods (default: A and B)
        not_testable: why            # optional: the records cannot test it
        command: fedbench run ...    # optional: how to run a missing cell ({a} {b} {setting} {roc})
        claim: ">"                   # the paper's direction where a figure is null
        figure_note: ...             # what a null figure means (default: not legible in our copy)

Pairing is :func:`fedbench.leaderboard.compare.compare`'s: A's row and B's row of the same
cohort (resource label, federation, task config), the same setting, the seeds both have.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from fedbench.infiles import read_yaml
from fedbench.leaderboard.claims_schema import CLAIMS, FIXES, check_file
from fedbench.errors import UserError
from fedbench.leaderboard.groups import RowKey, Section, raw_variant, show_value
from fedbench.leaderboard.stats import ci_half_width, mean, paired_t_test, sample_std, t_quantile_975, two_sided_p

__all__ = ["Ablation", "Claim", "Explanation", "Fix", "Measured", "claim_cells", "find_row", "has_fields", "load_claims", "load_fixes",
           "measure", "paper_names", "seeds_needed"]

#: the file of :class:`Fix` entries next to the claim files (not a paper)
FIXES_FILE = "fixes.yaml"


#: the kinds of an ``explained_by`` entry: a reading of code or text, or a measurement
EXPLANATION_KINDS = ("code reading", "measurement")


@dataclass(frozen=True)
class Ablation:
    """One factor moved toward the paper's setting (an ``explained_by`` entry's ``ablations``)."""

    factor: str  # what the arm changes, in words
    setting: str  # the data setting (a column of the claim's block)
    arm: tuple  # ((field, canonical JSON value), ...): replace or extend the group's ``where``
    command: str | None = None  # how to run the arm, its placeholders filled for this setting
    methods: tuple = ()  # the claim's methods the arm applies to (empty: both)
    against: Ablation | None = None  # the arm whose gap the change is measured from (None: the claim's fields)

    def where(self, base: tuple, method: str) -> tuple:
        """The group's ``where`` ``base`` for ``method``: with the arm's fields in place if the
        arm applies to it."""
        if self.methods and method not in self.methods:
            return base
        return tuple(sorted({**dict(base), **dict(self.arm)}.items()))

    def arm_text(self) -> str:
        """``field=value, ...``, and the methods it applies to when not both."""
        fields = ", ".join(f"{k}={show_value(v)}" for k, v in self.arm)
        return fields + (f" for {', '.join(self.methods)} only" if self.methods else "")


def _ablations(raw, columns, pair: tuple, roc: str, where: str) -> tuple[Ablation, ...]:
    """An entry's ``ablations`` (a list of {factor, settings, arm, methods, command, against}; its
    shape checked by the schema), one :class:`Ablation` per setting; ``columns``: the block's
    settings, which ``settings`` must be; ``pair``: the claim's A and B, which ``methods`` may
    name; ``against``: another factor of the list (with the entry's settings and no ``against`` of
    its own) whose arm gap the change is measured from, in place of the claim's fields. In
    ``methods`` and ``command``, ``{a}``, ``{b}`` and ``{roc}`` are the claim's and ``{setting}``
    the arm's (filled as :meth:`Claim.run_command` fills them), so that one list (a YAML anchor)
    can serve several methods and groups."""
    def fill(text: str, w: str, setting: str = "") -> str:
        try:
            return text.format(a=pair[0], b=pair[1], roc=roc, setting=setting)
        except (KeyError, IndexError, ValueError) as e:
            raise UserError(f"{w}: {text!r} may name only {{a}}, {{b}}, {{roc}}, {{setting}} ({e!r})") from None

    pending = []  # (Ablation, where, the factor it is measured against or None)
    for i, a in enumerate(raw or ()):
        w = f"{where} ablation {i + 1}"
        factor, settings = " ".join(a["factor"].split()), a["settings"]
        methods = tuple(fill(m, w) for m in a.get("methods") or ())
        if not a["arm"] or not factor:
            raise UserError(f"{w}: needs a factor and a non-empty arm (fields: values)")
        if not settings or {str(s) for s in settings} - {str(c) for c in columns}:
            raise UserError(f"{w}: settings must list columns of the block ({', '.join(str(c) for c in columns)}), "
                            f"got {settings!r}")
        if set(methods) - set(pair):
            raise UserError(f"{w}: methods must name the claim's methods ({', '.join(pair)}), got {list(methods)!r}")
        against = None if a.get("against") is None else " ".join(a["against"].split())
        for s in map(str, settings):
            cmd = None if a.get("command") is None else " ".join(fill(a["command"], w, s).split())
            pending.append((Ablation(factor, s, _fields(a["arm"]), cmd, methods), w, against))
    arms = {(ab.factor, ab.setting): ab for ab, _, against in pending if against is None}
    out = []
    for ab, w, against in pending:
        if against is not None and (against, ab.setting) not in arms:
            raise UserError(f"{w}: against must name another factor of these ablations, with setting "
                            f"{ab.setting} and no against of its own, got {against!r}")
        out.append(ab if against is None else replace(ab, against=arms[against, ab.setting]))
    return tuple(out)


@dataclass(frozen=True)
class Explanation:
    """Why the paper's row of a method differs from ours (the group's ``explained_by``)."""

    kind: str  # one of EXPLANATION_KINDS
    text: str
    measured_by: str | None  # the preset or records that measure(d) it
    ablations: tuple = ()  # (Ablation, ...): measured from the records (claims_ablation)

    def line(self) -> str:
        """One line: the kind (a code reading says it is not yet a measurement), the text, the source."""
        head = "code reading, not yet a measurement" if self.kind == "code reading" else "measured"
        src = "" if self.measured_by is None else (f" (measured by {self.measured_by})" if self.kind == "measurement"
                                                   else f" (to measure: {self.measured_by})")
        return f"{head}: {self.text}{src}"


@dataclass(frozen=True)
class Claim:
    paper: str
    table: str
    task: str
    a: str  # the paper's method
    b: str  # the method it is claimed to beat (or, with sign -1, to trail)
    roc: str  # the records' resource label
    where: tuple  # ((field, canonical JSON value), ...) the rows' variant must contain
    group: str  # the paper's name of the resource group / federation
    setting: str  # our setting
    column: str  # the paper's column
    fig_a: float | None
    fig_b: float | None
    sign: int  # +1: the paper has A ahead of B; -1: behind
    not_testable: str | None  # why the committed records cannot test it
    command: str | None  # how to run a missing cell, with {a} {b} {setting} {roc} and the fields of ``where``
    figure_note: str  # what a null figure means (the block's ``figure_note``)
    note: str | None = None  # about B's row of the paper's table (the group's ``notes``): shown on this claim only
    explained_by: Explanation | None = None  # why B's paper row differs from ours (the group's ``explained_by``)

    @property
    def paper_diff(self) -> float | None:
        return None if self.fig_a is None or self.fig_b is None else self.fig_a - self.fig_b

    @property
    def where_values(self) -> dict:
        """``where`` as {field: value}, decoded from its canonical JSON."""
        return {k: json.loads(v) for k, v in self.where}

    def run_command(self) -> str | None:
        """``command`` with ``{a} {b} {setting} {roc}`` and the fields of ``where`` filled in."""
        if self.command is None:
            return None
        return self.command.format(**self.where_values, a=self.a, b=self.b, setting=self.setting, roc=self.roc)


@dataclass(frozen=True)
class Fix:
    """A correction to a method after which older records no longer show its current behaviour."""

    commit: str
    committed_at: str  # ISO 8601, compared with the records' ``run.created_at``
    what: str
    methods: tuple  # the records of these methods ...
    settings: tuple  # ... or of these settings (``k/-``: any ``<int>/-``) predate it

    def concerns(self, rec: dict) -> bool:
        """The record's method or setting is one the fix changed."""
        run = rec["run"]
        setting = run["run_config"]["setting"]
        kinds = {setting} | ({"k/-"} if setting.endswith("/-") and setting[:-2].isdigit() else set())
        return run["method"] in self.methods or bool(kinds & set(self.settings))

    def affects(self, rec: dict) -> bool:
        """The record is concerned and was created before the fix was committed."""
        return self.concerns(rec) and rec["run"]["created_at"] < self.committed_at


def _need(d: dict, key: str, where: str):
    if not isinstance(d, dict) or key not in d:
        raise UserError(f"{where}: missing {key!r}")
    return d[key]


def _figure(v, where: str) -> float | None:
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return None if v is None else float(v)
    raise UserError(f"{where}: a figure must be a number or null, got {v!r}")


def _fields(d: dict) -> tuple:
    """{field: value} as sorted ((field, canonical JSON value), ...), as ``where`` is kept."""
    return tuple(sorted((str(k), json.dumps(v, sort_keys=True, separators=(",", ":"))) for k, v in d.items()))


def _explanations(group: dict, figures: dict, method: str, columns, where: str) -> dict[str, Explanation]:
    """The group's ``explained_by``: {method of its figures: Explanation}."""
    raw = group.get("explained_by") or {}
    if not isinstance(raw, dict) or set(raw) - set(figures):
        raise UserError(f"{where}: explained_by must map methods of the group's figures to "
                        "{kind, text, measured_by}")
    out = {}
    for b, e in raw.items():
        w = f"{where} explained_by {b}"
        kind, text = str(_need(e, "kind", w)), _need(e, "text", w)
        if kind not in EXPLANATION_KINDS:
            raise UserError(f"{w}: kind must be one of {', '.join(EXPLANATION_KINDS)}, got {kind!r}")
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"{w}: text must be a non-empty string")
        src = e.get("measured_by")
        ablations = _ablations(e.get("ablations"), columns, (method, b), str(group["roc"]), w)
        if kind == "measurement" and not ablations:
            raise UserError(f"{w}: a measurement needs ablations (the arms whose records measure it)")
        out[b] = Explanation(kind, " ".join(text.split()), None if src is None else " ".join(str(src).split()),
                             ablations)
    return out


def _block_claims(paper: str, block: dict, where: str) -> list[Claim]:
    table, task, method = (_need(block, k, where) for k in ("table", "task", "method"))
    columns = _need(block, "columns", where)
    declared = {">": 1, "<": -1, None: None}.get(block.get("claim"), 0)
    if declared == 0:
        raise UserError(f"{where}: claim must be '>' or '<', got {block.get('claim')!r}")
    out = []
    for gi, group in enumerate(_need(block, "groups", where)):
        gw = f"{where} group {gi + 1}"
        roc = str(_need(group, "roc", gw))
        figures = _need(group, "figures", gw)
        if method not in figures:
            raise UserError(f"{gw}: no figures of {method}")
        fields = _fields(group.get("where") or {})
        notes = group.get("notes") or {}
        if not isinstance(notes, dict) or set(notes) - set(figures):
            raise UserError(f"{gw}: notes must map methods of the group's figures to a text")
        explained = _explanations(group, figures, method, columns, gw)
        for b, figs_b in figures.items():
            if b == method:
                continue
            for i, (setting, column) in enumerate(columns.items()):
                cw = f"{gw} {b} {column}"
                if len(figures[method]) != len(columns) or len(figs_b) != len(columns):
                    raise UserError(f"{gw}: each method needs one figure per column ({len(columns)})")
                fa, fb = _figure(figures[method][i], cw), _figure(figs_b[i], cw)
                if fa is not None and fb is not None:
                    if fa == fb:
                        raise UserError(f"{cw}: the paper's figures are equal, no direction to test")
                    sign = 1 if fa > fb else -1
                elif declared is None:
                    raise UserError(f"{cw}: a figure is null, so the block needs claim: '>' or '<'")
                else:
                    sign = declared
                out.append(Claim(paper, str(table), str(task), str(method), str(b), roc, fields,
                                 str(group.get("paper_group", roc)), str(setting), str(column), fa, fb, sign,
                                 block.get("not_testable"), block.get("command"),
                                 str(block.get("figure_note", "figure not legible in our copy")),
                                 None if notes.get(b) is None else str(notes[b]), explained.get(b)))
    return out


def paper_names(claims_dir: str | Path) -> list[str]:
    """The papers with a claim file under ``claims_dir``, sorted."""
    return sorted(p.stem for p in Path(claims_dir).glob("*.yaml") if p.name != FIXES_FILE)


def load_claims(claims_dir: str | Path, paper: str) -> tuple[str, list[Claim]]:
    """(title, claims in file order) of ``<claims_dir>/<paper>.yaml``."""
    names = paper_names(claims_dir)
    if paper not in names:
        raise UserError(f"no claims of paper {paper!r} under {claims_dir} (have: {', '.join(names) or 'none'})")
    path = Path(claims_dir) / f"{paper}.yaml"
    check_file(path, CLAIMS, "claims file")  # its shape, with line numbers, before reading it
    doc = read_yaml(path, "claims file")
    out = []
    for bi, block in enumerate(_need(doc, "blocks", str(path))):
        out += _block_claims(paper, block, f"{path} block {bi + 1}")
    return str(doc.get("title", paper)), out


def load_fixes(claims_dir: str | Path) -> list[Fix]:
    path = Path(claims_dir) / FIXES_FILE
    if not path.is_file():
        return []
    check_file(path, FIXES, "fixes file")
    doc = read_yaml(path, "fixes file")
    return [Fix(str(_need(f, "commit", str(path))), str(_need(f, "committed_at", str(path))),
                str(_need(f, "what", str(path))), tuple(f.get("methods") or ()), tuple(f.get("settings") or ()))
            for f in _need(doc, "fixes", str(path))]


def find_row(sec: Section, method: str, roc: str, where: tuple, setting: str) -> RowKey | None:
    """The one row of ``method`` with resource label ``roc`` whose records in ``setting``
    all have the fields of ``where`` (their whole variant: a field the table drops because
    every run shares it, e.g. ``rounds`` when one budget was run, still counts); None if
    there is none; a UserError if several match (the claim must say which)."""
    found = [rk for rk in sec.rows if rk.method == method and rk.label == roc
             and _has(sec.runs.get(rk, ()), setting, where)]
    if len(found) > 1:
        raise UserError(f"{sec.task}: {len(found)} rows of {method} (RoC {roc}) match; add fields to the claim's "
                        "'where' to pick one")
    return found[0] if found else None


def claim_cells(sec: Section | None, c: Claim, setting: str, wa: tuple, wb: tuple) -> tuple:
    """(row of A, row of B, {seed: A's value}, {seed: B's value}) of claim ``c`` in ``setting``,
    A's row picked by the fields ``wa`` and B's by ``wb`` (:func:`find_row`; a claim's A and B
    are two methods, so two rows); the cells are empty where a row is missing."""
    if sec is None:
        return None, None, {}, {}
    ra, rb = find_row(sec, c.a, c.roc, wa, setting), find_row(sec, c.b, c.roc, wb, setting)
    if ra is None or rb is None:
        return ra, rb, {}, {}
    return ra, rb, sec.cells.get((ra, setting)) or {}, sec.cells.get((rb, setting)) or {}


def _has(recs, setting: str, where: tuple) -> bool:
    """Some of ``recs`` ran in ``setting``, and all of those have every (field, value) of ``where``."""
    cell = [r for r in recs if r["run"]["run_config"]["setting"] == setting]
    return bool(cell) and all(has_fields(r, where) for r in cell)


def has_fields(rec: dict, where: tuple) -> bool:
    """The record's whole variant (:func:`~fedbench.leaderboard.groups.raw_variant`) has every
    (field, canonical JSON value) of ``where``; a method field (``method.<name>``) only where the
    record's method has that field, so one ``where`` pins FLoRA's ``server_rule`` in a group whose
    other methods have none."""
    variant = raw_variant(rec)
    return all(variant.get(k) == v or (k.startswith("method.") and k not in variant) for k, v in where)


@dataclass(frozen=True)
class Measured:
    """A - B over the seeds both rows have in one setting (displayed scale)."""

    seeds: tuple
    mean_a: float
    mean_b: float
    diff: float
    half: float  # 95 % CI half-width of the paired difference
    sd: float  # sample standard deviation of the paired differences
    p: float | None  # two-sided paired t-test


def measure(a: dict, b: dict) -> Measured | None:
    """The paired comparison of two cells ({seed: value}); None with fewer than 2 shared seeds."""
    test = paired_t_test(a, b)
    if test is None:
        return None
    seeds = tuple(sorted(set(a) & set(b)))
    d = [a[s] - b[s] for s in seeds]
    p = 0.0 if math.isinf(test.t) else two_sided_p(test.t, test.n - 1)
    return Measured(seeds, mean([a[s] for s in seeds]), mean([b[s] for s in seeds]), test.mean_diff,
                    ci_half_width(d), sample_std(d), p)


def seeds_needed(diff: float, sd: float, most: int = 1000) -> int | None:
    """The fewest seeds n >= 2 whose 95 % CI half-width ``t_{0.975,n-1} * sd / sqrt(n)`` is
    below ``|diff|``, taking ``sd`` as the per-seed spread; None if none up to ``most``."""
    for n in range(2, most + 1):
        if t_quantile_975(n - 1) * sd / math.sqrt(n) < abs(diff):
            return n
    return None
