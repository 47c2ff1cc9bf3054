"""The app's HTML pages: plain server-rendered forms (no script), escaped everywhere.

Nothing here shows a subject's id, responder or model: a rater sees a position in their own
list, the texts the method's subjects file names, and the rubric's items and anchors.
"""

from __future__ import annotations

from html import escape
from typing import Mapping

import pandas as pd

from jobs.rate.subjects import FormItem, Subject

__all__ = ["done_page", "error_page", "lead_page", "subject_page"]

_CSS = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:1.5rem auto;padding:0 1rem;color:#222;line-height:1.45}
h1{font-size:1.3rem} h2{font-size:1.1rem;margin-top:1.5rem} .muted{color:#666}
.banner{background:#fff4d6;border:1px solid #e0b000;padding:.5rem .8rem;border-radius:4px}
.subject{background:#f6f7f9;border:1px solid #dde;padding:.8rem;border-radius:4px;white-space:pre-wrap}
.turn{margin:.3rem 0} .role{font-weight:600;text-transform:capitalize}
fieldset{border:1px solid #dde;border-radius:4px;margin:.6rem 0;padding:.5rem .8rem}
fieldset.bad{border-color:#c00;background:#fff0f0} legend{font-weight:600}
label.pt{display:block;margin:.1rem 0} .errors{background:#fff0f0;border:1px solid #c00;padding:.5rem .8rem;border-radius:4px}
.saved{background:#eefbea;border:1px solid #2a2;padding:.5rem .8rem;border-radius:4px}
table{border-collapse:collapse;margin:.4rem 0} td,th{border:1px solid #ccd;padding:.2rem .5rem;text-align:left}
button{font-size:1rem;padding:.4rem 1.2rem} nav a{margin-right:1rem}
"""


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<meta name=viewport content='width=device-width,initial-scale=1'><style>{_CSS}</style></head>"
            f"<body>{body}</body></html>")


def _banner(restricted: bool) -> str:
    if not restricted:
        return ""
    return ("<p class=banner id=restricted><strong>Restricted data.</strong> This run holds clinical data: the page "
            "is served only to the cluster network. Do not copy its text elsewhere.</p>")


def _shown(subject: Subject) -> str:
    parts = []
    for s in subject.shown:
        if s.kind == "transcript":
            turns = "".join(f"<div class=turn><span class=role>{escape(r)}:</span> {escape(t)}</div>" for r, t in s.turns)
            parts.append(f"<h2>{escape(s.label)}</h2><div class=subject>{turns or '<em>(no turns)</em>'}</div>")
        else:
            parts.append(f"<h2>{escape(s.label)}</h2><div class=subject>{escape(s.text) or '<em>(empty)</em>'}</div>")
    return "".join(parts)


def _item(fi: FormItem, chosen: str | None, error: str | None, readonly: bool) -> str:
    it = fi.item
    head = f"<legend>{escape(it.name.replace('_', ' '))} <span class=muted>({it.min}-{it.max})</span></legend>"
    head += f"<div>{escape(it.definition)}</div>"
    if isinstance(it.anchors, str):
        head += f"<div class=muted>{escape(it.anchors)}</div>"
    points = []
    for p in it.points:
        anchor = it.anchors.get(p) if isinstance(it.anchors, dict) else None
        checked = " checked" if chosen is not None and str(chosen) == str(p) else ""
        disabled = " disabled" if readonly else ""
        points.append(f"<label class=pt><input type=radio name='{escape(fi.field)}' value='{p}'{checked}{disabled}> "
                      f"<strong>{p}</strong>{' - ' + escape(anchor) if anchor else ''}</label>")
    err = f"<div class=error role=alert>{escape(error)}</div>" if error else ""
    cls = " class=bad" if error else ""
    return f"<fieldset{cls} data-item='{escape(fi.field)}'>{head}{''.join(points)}{err}</fieldset>"


def subject_page(*, base: str, position: int, total: int, done: int, subject: Subject, items: list[FormItem],
                 form_description: str | None, restricted: bool, values: Mapping[str, str] | None = None,
                 errors: Mapping[str, str] | None = None, message: str = "", answered: Mapping[str, float] | None = None,
                 saved: bool = False) -> str:
    """One subject with the form (or, once rated, the rater's own answers, read-only)."""
    values, errors = values or {}, errors or {}
    readonly = answered is not None
    chosen = {k: str(int(v)) if float(v).is_integer() else str(v) for k, v in (answered or {}).items()} or values
    nav = []
    if position > 1:
        nav.append(f"<a href='{base}/{position - 1}'>&larr; previous</a>")
    if position < total:
        nav.append(f"<a href='{base}/{position + 1}'>next &rarr;</a>")
    nav.append(f"<a href='{base}'>first unrated</a>")
    body = [f"<h1>Subject {position} of {total}</h1>",
            f"<p class=muted id=progress>{done} of {total} rated. Who wrote what is hidden; rate what you read.</p>",
            _banner(restricted)]
    if saved:
        body.append(f"<p class=saved id=saved role=status>{escape(message or 'Saved.')}</p>")
    elif message:
        body.append(f"<div class=errors id=errors role=alert>{escape(message)}</div>")
    body.append(_shown(subject))
    groups = []
    last_rubric = None
    for fi in items:
        if fi.rubric.name != last_rubric and len({x.rubric.name for x in items}) > 1:
            groups.append(f"<h2>{escape(fi.rubric.evaluator_role.capitalize())} scale</h2>"
                          f"<p class=muted>{escape(fi.rubric.description or '')}</p>")
        last_rubric = fi.rubric.name
        groups.append(_item(fi, chosen.get(fi.field), errors.get(fi.field), readonly))
    intro = f"<p>{escape(form_description)}</p>" if form_description else ""
    if readonly:
        body.append(f"<h2>Your ratings</h2><p id=rated>You rated this subject.</p>{''.join(groups)}")
    else:
        comment = escape(values.get("comment", ""))
        body.append(f"<h2>Your ratings</h2>{intro}<form method=post action='{base}/{position}' id=rating>"
                    f"{''.join(groups)}<label>Comment (optional)<br><textarea name=comment rows=2 cols=60>{comment}"
                    f"</textarea></label><p><button type=submit id=submit>Save and go on</button></p></form>")
    body.append(f"<nav>{''.join(nav)}</nav>")
    return _page(f"Subject {position} of {total}", "".join(body))


def done_page(*, base: str, total: int, restricted: bool) -> str:
    return _page("All rated", f"<h1>All {total} subjects rated</h1>{_banner(restricted)}<p id=alldone>Thank you. "
                 f"Your ratings are saved.</p><nav><a href='{base}/1'>review your ratings</a></nav>")


def error_page(message: str) -> str:
    return _page("Not available", f"<h1>Not available</h1><p id=refused>{escape(message)}</p>")


def _table(df: pd.DataFrame, table_id: str) -> str:
    if df is None or df.empty:
        return f"<p class=muted id={table_id}>(nothing yet)</p>"
    return df.to_html(table_id=table_id, na_rep="NA", float_format=lambda v: f"{v:.3f}", border=0, index=False)


def lead_page(*, title: str, restricted: bool, progress: pd.DataFrame, alpha: pd.DataFrame, agreement,
              exports: list[tuple[str, str]], seed: int, per_subject: int, form: str) -> str:
    body = [f"<h1>{escape(title)}: progress and agreement</h1>", _banner(restricted),
            f"<p class=muted>Form {escape(form)}; {per_subject} raters per subject; shuffle seed {seed}. "
            "This page refreshes when reloaded.</p>",
            "<h2>Raters</h2>", _table(progress, "progress"),
            "<h2>Krippendorff's alpha among raters (ordinal), per item</h2>",
            "<p class=muted>Over the subjects at least two raters have rated so far; NA until defined.</p>",
            _table(alpha, "alpha")]
    if agreement is not None:
        body.append(f"<h2>Human vs LLM judges: {escape(agreement.label)}</h2>")
        body.append(_table(agreement.table.reset_index(), "agreement") if agreement.table is not None
                    else f"<p class=muted id=agreement>{escape(agreement.note)}</p>")
    links = ", ".join(f"<a href='{escape(href)}' class=export>{escape(name)}</a>" for name, href in exports)
    body.append(f"<p id=export>Export the ratings (CSV in the layout <code>jobs.import_ratings</code> reads): {links}</p>")
    return _page(f"{title}: progress", "".join(body))
