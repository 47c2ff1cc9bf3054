"""`jobs.mentalbench.curation_filters`: cleaning helpers, each filter's counts per source, the
switches and thresholds, dedupe across sources, and the report's arithmetic."""

from __future__ import annotations

import pandas as pd

from jobs.mentalbench.curation_filters import (
    KEPT_COLUMNS,
    CurationReport,
    FilterConfig,
    apply_filters,
    normalize_for_dedupe,
    strip_tags,
    strip_wrapping_quotes,
    unescape_entities,
)
from jobs.mentalbench.curation_sources import SourceSummary
from tests.unit.jobs.mentalbench.common import ANSWER, LONG, rows, source


def steps_by_name(steps) -> dict[str, dict[str, int]]:
    return {s.name: s.per_source for s in steps}


def test_html_cleaning_helpers():
    assert unescape_entities("you &amp; me &quot;ok&quot; &#39;x&#39; &nbsp;") == "you & me \"ok\" 'x' \xa0"
    assert strip_tags("<p>Hello <b>there</b></p><br/>bye") == "\nHello there\n\nbye"
    assert strip_tags('<a href="x">link</a> <!-- note --> <span class="c">t</span>') == "link  t"
    # Not markup: a heart, a comparison, a made-up bracket.
    for text in ("I <3 you", "if x < p and q > r", "<unsure> what to do"):
        assert strip_tags(text) == text
    assert strip_wrapping_quotes('"I feel low."') == "I feel low."
    assert strip_wrapping_quotes("\u201cI feel low.\u201d") == "I feel low."
    assert strip_wrapping_quotes('"He said" and "she said"') == '"He said" and "she said"'
    assert normalize_for_dedupe("  I'm SAD -- really\n sad!! ") == normalize_for_dedupe("i m sad really sad")


def test_each_filter_counts_per_source_and_counts_sum_up():
    a, b = source("a"), source("b", human_response=None, sensitivity="restricted")
    data_a = rows(
        ("I feel &quot;low&quot; &amp; tired " + LONG, ANSWER),           # entities -> kept, changed
        ("<p>" + LONG + "</p><br>", "<b>" + ANSWER + "</b>"),               # tags -> kept, changed
        ("<p></p>", ANSWER),                                                 # empty after cleaning
        (LONG, "   "),                                                       # empty response
        ("Help me.", ANSWER),                                                # too short context
        (LONG + " again", "Thanks."),                                        # too short response
        (" ".join(["word"] * 1001), ANSWER),                                 # too long context
        (LONG.upper() + "!!", ANSWER),                                       # duplicate within a
    )
    data_b = rows(
        ('"' + LONG + '"', None),                                            # quotes; duplicate across
        ("A completely different worry about my sleep and my job every night.", None),
    )
    kept, steps = apply_filters([(a, data_a), (b, data_b)], FilterConfig())
    counts = steps_by_name(steps)
    assert counts["html_entities"] == {"a": 1, "b": 0}
    assert counts["html_tags"] == {"a": 2, "b": 0}
    assert counts["wrapping_quotes"] == {"a": 0, "b": 1}
    assert counts["empty"] == {"a": 2, "b": 0}
    assert counts["too_short"] == {"a": 2, "b": 0}
    assert counts["too_long"] == {"a": 1, "b": 0}
    assert counts["duplicate_within_source"] == {"a": 1, "b": 0}
    assert counts["duplicate_across_sources"] == {"a": 0, "b": 1}
    assert kept.columns.tolist() == KEPT_COLUMNS
    assert kept["context_id"].tolist() == ["a:1", "a:2", "b:2"]
    # Each row carries its own source's sensitivity (CONTEXTS.sensitivity).
    assert kept["sensitivity"].tolist() == ["public", "public", "restricted"]
    assert kept.loc[0, "context"].startswith('I feel "low" & tired')
    assert "<" not in kept.loc[1, "context"] and kept.loc[1, "human_response"] == ANSWER
    removed = {name: sum(c.values()) for name, c in counts.items()
               if next(s for s in steps if s.name == name).action == "removed"}
    assert sum(removed.values()) + len(kept) == len(data_a) + len(data_b)
    assert kept["context_words"].tolist() == [len(t.split()) for t in kept["context"]]
    assert pd.isna(kept.loc[2, "response_words"]) and pd.isna(kept.loc[2, "human_response"])


def test_filters_can_be_switched_off_and_thresholds_moved():
    a = source("a")
    data = rows(("&amp; <p>" + LONG + "</p>", ANSWER), ("Help me now.", "Ok."), (LONG, ANSWER), (LONG, ANSWER))
    cfg = FilterConfig(unescape_html_entities=False, strip_html_tags=False, min_context_words=1,
                       min_response_words=1, dedupe=False)
    kept, steps = apply_filters([(a, data)], cfg)
    assert len(kept) == 4 and kept.loc[0, "context"].startswith("&amp; <p>")
    assert all(s.total == 0 for s in steps)


def test_dedupe_across_sources_keeps_the_first_source_and_matches_a_title_plus_body_context():
    """MentalBench reuses CounselChat question bodies without their titles: same context."""
    cc = source("cc", context=["title", "text"])
    mb = source("mb", human_response=None)
    body = "My partner and I fight every day about money and I feel like it is my fault."
    kept, steps = apply_filters(
        [(cc, rows(("Constant fights\n\n" + body, ANSWER))), (mb, rows((body.lower(), None), (LONG, None)))],
        FilterConfig())
    assert kept["context_id"].tolist() == ["cc:1", "mb:2"]
    assert steps_by_name(steps)["duplicate_across_sources"] == {"cc": 0, "mb": 1}
    kept, _ = apply_filters([(cc, rows(("Constant fights\n\n" + body, ANSWER))), (mb, rows((body, None)))],
                            FilterConfig(dedupe_on_body=False))
    assert len(kept) == 2
    # The other order: the first source wins, whichever it is.
    kept, steps = apply_filters([(mb, rows((body, None))), (cc, rows(("Constant fights\n\n" + body, ANSWER)))],
                                FilterConfig())
    assert kept["context_id"].tolist() == ["mb:1"]
    assert steps_by_name(steps)["duplicate_across_sources"] == {"mb": 0, "cc": 1}


def test_report_table_and_dict_add_up():
    a = source("a")
    kept, steps = apply_filters([(a, rows((LONG, ANSWER), ("Help.", ANSWER)))], FilterConfig())
    summary = SourceSummary(name="a", file="a.csv", sensitivity="public", rows_read=4,
                            rejected_by_reader={"empty context": 1}, not_read_limit=1, loaded=2, kept=len(kept))
    report = CurationReport([summary], steps)
    table = report.table()
    assert "reader: empty context" in table and "too_short" in table
    assert table.splitlines()[-1].split()[-2:] == ["1", "1"]  # kept: source a, total
    data = report.to_dict()
    assert data["kept_total"] == 1
    assert {f["name"]: f["total"] for f in data["filters"]}["too_short"] == 1
