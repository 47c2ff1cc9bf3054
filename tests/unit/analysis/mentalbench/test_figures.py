"""`analysis.mentalbench.figures`: every figure of the report is a drawn PNG."""

from __future__ import annotations

import numpy as np
import pandas as pd
from PIL import Image

from analysis.mentalbench import alignment_factor, figures, overall_table, signed_bias
from analysis.mentalbench.rouge import ROUGE_L
from tests.unit.analysis.helpers import SAMPLE_JUDGES


def drawn(path) -> bool:
    pixels = np.asarray(Image.open(path).convert("RGB"), dtype=float)
    return pixels.std() > 10 and (pixels.mean(axis=2) < 240).mean() > 0.01


def test_every_figure_is_drawn(sample, tmp_path):
    overall = overall_table(sample)
    rouge = pd.DataFrame({ROUGE_L: [0.3, 0.2, 0.1], "sd": [0.05, 0.04, 0.03], "n": [5, 5, 5]}, index=["a", "b", "c"])
    paths = [
        figures.overall_by_responder(overall, tmp_path / "overall.png"),
        figures.judge_vs_human(overall, SAMPLE_JUDGES, tmp_path / "jvh.png"),
        figures.af_heatmap(alignment_factor(sample), tmp_path / "af.png"),
        figures.bias_bars(signed_bias(sample), tmp_path / "bias.png"),
        figures.rouge_bars(rouge, tmp_path / "sub" / "rouge.png"),
    ]
    for p in paths:
        assert p.is_file() and drawn(p), p
