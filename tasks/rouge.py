"""Rouge-L of generations against references (Lin 2004, "ROUGE: A Package for Automatic
Evaluation of Summaries", Sec. 3: the F-measure of the longest common subsequence), the
metric of the generation tasks (Fed-HeLLo Sec. IV-A)."""

from __future__ import annotations

import numpy as np


def rouge_l(predictions: list[str], references: list[str]) -> float:
    """Mean Rouge-L F-measure (rouge-score, the implementation behind HF evaluate's)."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    if not predictions:
        return float("nan")
    return float(np.mean([scorer.score(r, p)["rougeL"].fmeasure for p, r in zip(predictions, references)]))
