"""The authors' failure handling and cleaning (issue 33 point 2), the synthesis step's default,
each switch also off: the role label required, the first line kept, a client's failed line a
filler at once, a therapist that keeps repeating ending its dialogue as an error row with the
reason. The whole step in-process (inline runner) against the loopback fake with scripted
answers; the expected texts and fillers are written out by hand from src/agents.py @ fcf2665."""

from __future__ import annotations

from jobs.core.schemas import DIALOGUES, ENDED_CAP, ENDED_ERROR, TURNS
from jobs.core.store import TableStore
from jobs.sqpsych.protocol import AuthorsRules
from jobs.sqpsych.synthesize import SynthesizeConfig, run
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.sqpsych.judging_helpers import RUN, fake_judges, write_profiles

# `Client.post_process`'s six lines for an empty or unlabeled answer, and `TherapySession.run`'s
# six for a repeated one, without their "Client: " label (the history adds it).
AUTHORS_UNUSABLE = ["[No reply]", "[Pause and thinking]", "[Keep silent]", "[Quiet]", "I don't know what to say",
                    "I don't know"]
AUTHORS_REPEAT = ["[Pause and say nothing]", "[Pause and thinking]", "[Sigh]", "[Takes a deep breath]",
                  "I don't know what to say", "I don't know"]

# One session of client c1 with model "ext" (therapist and client). Turn 5's therapist repeats
# turn 1 on every retry (its key `#5/rN` matches too); turn 4's client has no label; turn 6's
# client repeats turn 2, on every retry too.
SCRIPT = [
    {"request_key": r"#1$", "content": "Therapist: Hello, how have you been this week?"},
    {"request_key": r"#2$", "content": "Sure! Here is my reply.\nClient: Um, not great, honestly.\n(12 words)"},
    {"request_key": r"#3$", "content": "Therapist: What made it hard?\nWhat else happened?"},
    {"request_key": r"#4$", "content": "I just feel tired all the time."},
    {"request_key": r"#5", "content": "Therapist: Hello, how have you been this week?"},
    {"request_key": r"#6", "content": "Client: um, NOT great honestly"},
]


def _run(tmp_path, monkeypatch, script=SCRIPT, max_turns=6, max_regenerations=2, **rules):
    with FakeServer(script=script) as fake:
        fake_judges(monkeypatch, tmp_path / "conf", fake.base_url, names=("ext",))
        write_profiles(tmp_path / "run", {"c1": "public"})
        cfg = SynthesizeConfig(**RUN, run_dir=str(tmp_path / "run"), models=["ext"], max_turns=max_turns,
                               max_regenerations=max_regenerations, flush_every_s=0.05, **rules)
        # max_failed_fraction stays 0: an abandoned dialogue is an error row, not a failed step.
        assert run(cfg) == 0
        sent = [r["request_key"] for r in fake.log_lines()]
    dialogue = TableStore(tmp_path / "run", DIALOGUES).read().iloc[0]
    turns = TableStore(tmp_path / "run", TURNS).read().sort_values("turn")
    return sent, dialogue, turns


def test_the_defaults_are_the_authors_fillers():
    rules = AuthorsRules()
    assert (rules.unusable_fillers, rules.repeat_fillers) == (AUTHORS_UNUSABLE, AUTHORS_REPEAT)
    assert (rules.role_label, rules.first_line, rules.client_filler, rules.abandon_therapist) == ("exact",) + (True,) * 3


def test_the_authors_rules_label_first_line_filler_and_abandon(tmp_path, monkeypatch):
    sent, dialogue, turns = _run(tmp_path, monkeypatch, authors_rules=AuthorsRules(unusable_fillers=["[Quiet]"]))
    # The client is never asked again; the therapist's repeat is asked again once (max_regenerations
    # 2 is the authors' max_attempts: the first answer and one retry read), then the dialogue ends.
    assert sent == ["c1|ext#1", "c1|ext#2", "c1|ext#3", "c1|ext#4", "c1|ext#5", "c1|ext#5/r1"]
    assert turns["text"].tolist() == ["Hello, how have you been this week?", "Um, not great, honestly.",
                                      "What made it hard?", "[Quiet]"]
    assert turns["raw"].tolist()[3] == "I just feel tired all the time."  # the model's answer is kept
    # An error row with its reason, never a missing row; the four turns before it kept.
    assert (dialogue["status"], dialogue["ended_by"], dialogue["stopped_at_turn"]) == ("error", ENDED_ERROR, 4)
    assert dialogue["error"] == ("abandoned by its rules: turn 5 (therapist, ext): repeated an earlier utterance of "
                                 "the same agent after 1 regeneration(s): 'Therapist: Hello, how have you been this "
                                 "week?'")


def test_a_repeated_client_line_becomes_one_of_the_authors_repeat_fillers(tmp_path, monkeypatch):
    """With the therapist's repeat kept (abandon off), turn 6 is reached: the client repeats turn
    2 (same words, other case and punctuation) and a repeat filler takes its place."""
    sent, dialogue, turns = _run(tmp_path, monkeypatch, authors_rules=AuthorsRules(abandon_therapist=False))
    assert (dialogue["status"], dialogue["ended_by"]) == ("ok", ENDED_CAP)
    assert turns["text"].tolist()[3] in AUTHORS_UNUSABLE and turns["text"].tolist()[5] in AUTHORS_REPEAT
    assert turns["text"].tolist()[4] == "Hello, how have you been this week?"  # kept after 2 retries
    assert "c1|ext#6/r1" not in sent


def test_each_rule_switched_off_is_the_engines_own_behaviour(tmp_path, monkeypatch):
    off = AuthorsRules(role_label=False, first_line=False, client_filler=False, abandon_therapist=False)
    sent, dialogue, turns = _run(tmp_path, monkeypatch, authors_rules=off)
    assert (dialogue["status"], dialogue["ended_by"]) == ("ok", ENDED_CAP)
    # Every line kept (notes like "(12 words)" are still cleaned); the unlabeled client line kept;
    # both repeats asked again twice, then kept.
    assert turns["text"].tolist() == ["Hello, how have you been this week?", "Um, not great, honestly.",
                                      "What made it hard?\nWhat else happened?", "I just feel tired all the time.",
                                      "Hello, how have you been this week?", "um, NOT great honestly"]
    assert sent[-6:] == ["c1|ext#5", "c1|ext#5/r1", "c1|ext#5/r2", "c1|ext#6", "c1|ext#6/r1", "c1|ext#6/r2"]


# The authors' loop (src/agents.py, TherapySession.run) with max_attempts = 10, traced by hand:
#   answer 1 fails -> attempt_count 1, retry 1 made; the check reads it ...
#   answer 9 (retry 8) fails -> attempt_count 9, retry 9 made, 9 < 10: the loop goes on;
#   answer 10 (retry 9) read: if it passes, the while condition is false and it is kept;
#   if it fails -> attempt_count 10, retry 10 made, then `attempt_count >= max_attempts` raises:
#   retry 10 is never read and the dialogue is lost.
# So 9 failed answers then a good one: kept; 10 failed answers: lost. Here turn 3's therapist
# answers without its label (unusable) on its first call and on retries 1..n-1.
def _failing(n_failed: int) -> list[dict]:
    bad = [{"request_key": r"#3$", "content": "What made it hard?"}]
    bad += [{"request_key": rf"#3/r{k}$", "content": "What made it hard?"} for k in range(1, n_failed)]
    return ([{"request_key": r"#1$", "content": "Therapist: Hello, how have you been this week?"},
             {"request_key": r"#2$", "content": "Client: Um, not great, honestly."}] + bad +
            [{"request_key": r"#3", "content": "Therapist: What made this week hard?"},
             {"request_key": r"#4$", "content": "Client: Work, mostly."}])


def test_nine_failed_therapist_answers_then_a_good_one_keep_the_dialogue(tmp_path, monkeypatch):
    sent, dialogue, turns = _run(tmp_path, monkeypatch, script=_failing(9), max_turns=4, max_regenerations=10)
    assert [k for k in sent if k.startswith("c1|ext#3")] == ["c1|ext#3"] + [f"c1|ext#3/r{k}" for k in range(1, 10)]
    assert (dialogue["status"], dialogue["ended_by"]) == ("ok", ENDED_CAP)
    assert turns["text"].tolist()[2] == "What made this week hard?"
    assert turns["regenerations"].tolist()[2] == 9


def test_ten_failed_therapist_answers_lose_the_dialogue(tmp_path, monkeypatch):
    sent, dialogue, turns = _run(tmp_path, monkeypatch, script=_failing(10), max_turns=4, max_regenerations=10)
    # The first answer and 9 retries read; the authors' 10th retry, never read, is not made.
    assert [k for k in sent if k.startswith("c1|ext#3")] == ["c1|ext#3"] + [f"c1|ext#3/r{k}" for k in range(1, 10)]
    assert (dialogue["status"], dialogue["ended_by"], dialogue["stopped_at_turn"]) == ("error", ENDED_ERROR, 2)
    assert dialogue["error"].startswith("abandoned by its rules: turn 3 (therapist, ext): utterance without the "
                                        "agent's label after 9 regeneration(s)")
