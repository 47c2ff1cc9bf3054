"""DataFrames to CSV, Markdown and HTML (no tabulate or jinja2 needed)."""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd


def format_value(v, digits: int = 3) -> str:
    """Numbers to fixed decimals (p-values in scientific notation when tiny), NaN/None to ''."""
    if v is None or v is pd.NA:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if math.isnan(v):
            return ""
        if v != 0 and abs(v) < 10 ** (-digits):
            return f"{v:.2e}"
        return f"{v:.{digits}f}"
    return str(v)


def _frame_with_index(df: pd.DataFrame) -> pd.DataFrame:
    """The index as a first column when it carries names (a RangeIndex is dropped)."""
    if isinstance(df.index, pd.RangeIndex) and df.index.name is None:
        return df
    return df.reset_index()


def to_markdown(df: pd.DataFrame, digits: int = 3) -> str:
    t = _frame_with_index(df)
    header = [str(c) for c in t.columns]
    lines = ["| " + " | ".join(h.replace("|", "\\|") for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    for row in t.itertuples(index=False):
        cells = [format_value(v, digits).replace("|", "\\|").replace("\n", " ") for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_html(df: pd.DataFrame, caption: str = "", digits: int = 3, table_id: str | None = None) -> str:
    t = _frame_with_index(df)
    idattr = f' id="{html.escape(table_id)}"' if table_id else ""
    parts = [f"<table{idattr}>"]
    if caption:
        parts.append(f"<caption>{html.escape(caption)}</caption>")
    parts.append("<thead><tr>" + "".join(f"<th>{html.escape(str(c))}</th>" for c in t.columns) + "</tr></thead>")
    parts.append("<tbody>")
    for row in t.itertuples(index=False):
        cells = []
        for k, v in enumerate(row):
            cls = ' class="num"' if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) else ""
            tag = "th" if k == 0 and t is not df else "td"
            cells.append(f"<{tag}{cls}>{html.escape(format_value(v, digits))}</{tag}>")
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append("</tbody></table>")
    return "\n".join(parts)


def write_table(df: pd.DataFrame, tables_dir: Path, name: str, caption: str = "", digits: int = 3) -> None:
    """`<name>.csv` (full precision) and `<name>.md` (caption, then the rounded table)."""
    tables_dir.mkdir(parents=True, exist_ok=True)
    _frame_with_index(df).to_csv(tables_dir / f"{name}.csv", index=False)
    md = (f"**{caption}**\n\n" if caption else "") + to_markdown(df, digits)
    (tables_dir / f"{name}.md").write_text(md, encoding="utf-8")
