"""The self-contained HTML report page every method's report writes through.

`ReportWriter` collects sections; each table is written as it is added (CSV and Markdown under
`tables/`, an HTML table in the page) and each figure is embedded as a data URI, so the page,
with its CSS inline, can be mailed or archived as one file.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.provenance import provenance_html
from analysis.render import to_html, write_table

CSS_STYLE = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1250px;margin:2em auto;
 padding:0 1.5em;color:#222;line-height:1.45}
h1{border-bottom:3px solid #4c72b0;padding-bottom:.3em} h2{margin-top:2.2em;border-bottom:1px solid #ccc}
h3{margin-top:1.6em;color:#333}
table{border-collapse:collapse;margin:1em 0 .4em;font-size:13px;min-width:640px}
caption{caption-side:top;text-align:left;font-weight:600;padding:.3em 0;color:#333}
th,td{border:1px solid #d0d0d0;padding:3px 8px} thead th{background:#eef2f8} tbody th{text-align:left;
 background:#fafafa;font-weight:500} td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tbody tr:nth-child(even) td{background:#fbfbfd}
figure{margin:1.2em 0} figure img{max-width:100%;border:1px solid #ddd} figcaption{font-size:13px;color:#555}
.note{font-size:13px;color:#555;margin:.2em 0 .8em} .missing{background:#fff6e0;border-left:4px solid #e0a000;
 padding:.5em 1em} .howto{background:#f2f6fb;border-left:4px solid #4c72b0;padding:.6em 1em}
nav ol{columns:2;font-size:14px} code{background:#f3f3f3;padding:0 3px}
"""


def slug(name: str) -> str:
    """A file-name-safe form of a name: `gemini-2.5-flash` -> `gemini-2-5-flash`."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@dataclass
class Section:
    id: str
    title: str
    parts: list[str] = field(default_factory=list)


class ReportWriter:
    """Collects sections and writes each table (CSV + Markdown) and figure as it is added."""

    def __init__(self, out_dir: Path, run_dir: Path | None = None):
        self.out_dir = out_dir
        self.run_dir = run_dir  # its run.json's record of what produced the run heads the page
        self.tables_dir = out_dir / "tables"
        self.figures_dir = out_dir / "figures"
        self.sections: list[Section] = []

    def section(self, sid: str, title: str) -> Section:
        self.sections.append(Section(sid, title))
        return self.sections[-1]

    def table(self, sec: Section, df: pd.DataFrame, name: str, caption: str, notes: str = "", digits: int = 3) -> None:
        write_table(df, self.tables_dir, name, caption, digits)
        sec.parts.append(to_html(df, caption, digits, table_id=f"t-{name}"))
        if notes:
            sec.parts.append(f'<p class="note">{notes}</p>')

    def file_only(self, df: pd.DataFrame, name: str, caption: str, digits: int = 3) -> None:
        """A table written to `tables/` but not shown in the page."""
        write_table(df, self.tables_dir, name, caption, digits)

    def figure(self, sec: Section, path: Path, caption: str) -> None:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        sec.parts.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")

    def text(self, sec: Section, body: str, cls: str = "") -> None:
        sec.parts.append(f'<p class="{cls}">{body}</p>' if cls else f"<p>{body}</p>")

    def missing(self, sec: Section, why: str) -> None:
        self.text(sec, html.escape(why), "missing")

    def html(self, title: str, header: str) -> str:
        provenance = provenance_html(self.run_dir) if self.run_dir is not None else ""
        toc = "".join(f'<li><a href="#{s.id}">{html.escape(s.title)}</a></li>' for s in self.sections)
        body = "".join(f'<section id="{s.id}"><h2>{html.escape(s.title)}</h2>{"".join(s.parts)}</section>'
                       for s in self.sections)
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
                f"<style>{CSS_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{provenance}{header}"
                f"<nav><ol>{toc}</ol></nav>{body}</body></html>")

    def write(self, title: str, header: str, name: str = "report.html") -> Path:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / name
        path.write_text(self.html(title, header), encoding="utf-8")
        return path
