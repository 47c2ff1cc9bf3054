"""SQPsych's single-turn preference (the paper's Figure 5): a fine-tuned model against baselines.

    python -m jobs.pipeline experiment=sqpsych steps=[single_turn,report] \
        single_turn.model=my-sqpsychllm single_turn.baselines=[camel-llama3-8b,psych8k-llama3-8b]
    python -m jobs.pipeline experiment=sqpsych steps=[single_turn] single_turn.model=M dry_run=true

The method, as the code runs it:
1. read CounselBench-Adv's questions from its published table (`single_turn.source`,
   `jobs.sqpsych.counselbench`; the default is this project's 12-question sample) and record them
   in `RUN_DIR/contexts/` (source `counselbench-adv`, the failure mode in `labels`);
2. refuse before any request if the questions' sensitivity forbids a model or judge (checked for
   every model and judge, fail closed);
3. ask the fine-tuned model (`single_turn.model`) and every baseline (`single_turn.baselines`) for
   one answer to each question, through the shared generate stage (`jobs.generate.GenerateStage`:
   the same call, reasoning removal, failure rows and resume as MentalBench's answers): rows of
   `RUN_DIR/responses/`. As the paper: the question alone is the user message, no system prompt
   (`single_turn.system_prompt: none`); `guarded` sends this project's
   `conf/sqpsych/single_turn_system.txt`, which warns against the benchmark's failure modes (no
   diagnosis, no medication advice, no assumed facts) and so primes every model against the very
   traps the questions set: a different comparison, named so in every row's prompt_version;
4. for each question where the fine-tuned model and a baseline both answered, every judge is asked
   twice, once with each answer first, on `conf/rubric/sqpsych_single_turn_preference.yaml`
   (subject_type `pair`, subject_id `<question id>|<model>|<baseline>|ab` / `...|ba`): `scores` rows.
   The verdicts (both orders mapped back, a judge whose orders disagree votes draw, the majority
   over judges, a tie for the most a draw) are `analysis.sqpsych.preference`'s, as for the
   dialogue preference; the report's single-turn section draws Figure 5 from them, per judge (as
   the paper reports each, "under GPT-4o") and by majority. Both orders are this project's
   addition (a position-bias control); the paper states one judgment per pair.

Nothing is planned unless `single_turn.model` is set; the step then says what the comparison would
cost. The dry run states the calls: questions x (1 + baselines) answers and questions x baselines
x 2 orders x judges judgments.
"""

from __future__ import annotations

import hashlib
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import Field, model_validator

from jobs.config import PromptConfig
from jobs.core.base import StrictModel
from jobs.core.configfiles import ConfigError, load_model
from jobs.core.modelconfig import GenerationOverrides
from jobs.core.preflight import summarize
from jobs.core.schemas import CONTEXTS, RESPONSES, STATUS_OK, SUBJECT_PAIR, rows_to_arrow
from jobs.core.store import TableStore
from jobs.generate import GenerateStage
from jobs.judge import judge_planned, open_judging
from jobs.runner import plan_text, run_model_stage
from jobs.sqpsych.counselbench import CONTEXT_ID, FAILURE_MODE, QUESTION, AdvSource, load_adv
from jobs.sqpsych.panel import JudgingConfig
from jobs.sqpsych.preference import ORDERS, pair_subject_id
from serving.governance import check_all

__all__ = ["SingleTurnConfig", "SingleTurnSettings", "plan_answers", "plan_judgments", "run"]

SINGLE_TURN_PLACEHOLDERS = ("question", "answer_a", "answer_b")
# The answering models' system prompt by name: none (the paper), or this project's guarded one.
SYSTEM_PROMPTS: dict[str, str | None] = {"none": None, "guarded": "sqpsych/single_turn_system.txt"}


class SingleTurnSettings(StrictModel):
    """The single-turn comparison (`single_turn.*` keys)."""

    model: str | None = Field(None, description="The fine-tuned model under test (a model file). None: the step "
                              "plans nothing and says what the comparison would cost.")
    baselines: list[str] = Field(default_factory=list, description="The baselines it is compared with (model "
                                 "files; the paper: CAMEL and a model tuned on Psych8k).")
    source: AdvSource = Field(default_factory=AdvSource, description="CounselBench-Adv's table and its layout.")
    system_prompt: Literal["none", "guarded"] = Field(
        "none", description="The answering models' system prompt: `none`, the question alone (the paper); "
        "`guarded`, this project's conf/sqpsych/single_turn_system.txt, which warns against CounselBench-Adv's "
        "failure modes (primes the models: not the paper's comparison).")
    prompt: PromptConfig = Field(
        default_factory=lambda: PromptConfig(version="sqpsych-single-turn-v2"),
        description="The answering prompt: the question is the user message ({context}); a system text of "
        "one's own here instead of system_prompt.")
    generation: GenerationOverrides = Field(
        default_factory=lambda: GenerationOverrides(temperature=0.7, max_tokens=512),
        description="Overrides of the answering models' sampling (CounselBench's runs: temperature 0.7).")
    rubric: str = Field("sqpsych_single_turn_preference", description="The pairwise rubric (conf/rubric/).")

    @model_validator(mode="after")
    def _distinct(self) -> "SingleTurnSettings":
        if len(set(self.baselines)) < len(self.baselines):
            raise ValueError(f"single_turn.baselines repeat a model: {self.baselines}")
        if self.model is not None and self.model in self.baselines:
            raise ValueError(f"single_turn.model {self.model!r} is also a baseline: compare it with other models")
        if self.system_prompt != "none" and (self.prompt.system or self.prompt.system_file):
            raise ValueError(f"single_turn.system_prompt={self.system_prompt} and single_turn.prompt's own system "
                             "text are both set: keep one (system_prompt=none with your prompt.system, or no "
                             "prompt.system with system_prompt=guarded)")
        return self

    def answer_prompt(self) -> PromptConfig:
        """The prompt the answering models get: `prompt`, with the named system prompt's file."""
        file = SYSTEM_PROMPTS[self.system_prompt]
        return self.prompt.model_copy(update={"system_file": file}) if file else self.prompt

    def models(self) -> list[str]:
        return ([self.model] if self.model else []) + list(self.baselines)


class SingleTurnConfig(JudgingConfig):
    """The step's key beyond the judges'."""

    single_turn: SingleTurnSettings = Field(default_factory=SingleTurnSettings,
                                            description="Fine-tuned model vs baselines on CounselBench-Adv.")


# --- planning -------------------------------------------------------------------------------------


def plan_answers(questions: pd.DataFrame, models: list[str], done: set[tuple[str, ...]]) -> pd.DataFrame:
    """(question, model) rows not yet answered, models interleaved; the question as `context`."""
    rows = [{"context_id": cid, "context": q, "model": m}
            for cid, q in zip(questions[CONTEXT_ID], questions[QUESTION]) for m in models if (cid, m) not in done]
    return pd.DataFrame(rows, columns=["context_id", "context", "model"])


def plan_judgments(questions: pd.DataFrame, responses: pd.DataFrame, model: str, baselines: list[str],
                   judges: list[str]) -> pd.DataFrame:
    """(question, baseline, order, judge) rows where both the model and the baseline answered ok:
    `question`, `answer_a` / `answer_b` in the order shown (order ab: the fine-tuned model's first)."""
    ok = responses[responses["status"] == STATUS_OK]
    answer = {(str(c), m): r for c, m, r in zip(ok["context_id"], ok["model"], ok["response"])}
    rows = []
    for cid, question in zip(questions[CONTEXT_ID], questions[QUESTION]):
        for base in baselines:
            if (cid, model) not in answer or (cid, base) not in answer:
                continue
            for order in ORDERS:
                first, second = (model, base) if order == "ab" else (base, model)
                rows.extend({"subject_type": SUBJECT_PAIR, "subject_id": pair_subject_id(cid, model, base, order),
                             "context_id": cid, "responder": f"{model}|{base}", "judge": j, "question": question,
                             "answer_a": answer[(cid, first)], "answer_b": answer[(cid, second)]} for j in judges)
    cols = ["subject_type", "subject_id", "context_id", "responder", "judge", "question", "answer_a", "answer_b"]
    return pd.DataFrame(rows, columns=cols)


def call_count(n_questions: int, n_baselines: int, n_judges: int) -> tuple[int, int]:
    """(answers, judgments) of the whole comparison."""
    return n_questions * (1 + n_baselines), n_questions * n_baselines * len(ORDERS) * n_judges


# --- the step -------------------------------------------------------------------------------------


def _write_contexts(run_dir: Path, questions: pd.DataFrame, src: AdvSource) -> None:
    store = TableStore(run_dir, CONTEXTS, writer=True)
    done = {k[0] for k in store.existing_keys()}
    now = datetime.now(timezone.utc)
    store.append(rows_to_arrow(CONTEXTS, [
        {"context_id": cid, "source": src.name, "source_id": cid, "sensitivity": src.sensitivity, "context": q,
         "context_words": len(q.split()), "labels": [mode], "labeler": src.name, "status": STATUS_OK,
         "run_id": run_dir.name, "created_at": now}
        for cid, q, mode in zip(questions[CONTEXT_ID], questions[QUESTION], questions[FAILURE_MODE])
        if cid not in done]))


def _prompt_version(st: SingleTurnSettings) -> str:
    """The prompt's version, the system prompt's name and a hash of the texts: each row says
    which prompt it was answered under."""
    prompt = st.answer_prompt()
    text = (prompt.system_text() or "") + "\x1f" + prompt.user_text()
    return f"{prompt.version}-{st.system_prompt}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def run(cfg: SingleTurnConfig) -> int:
    st = cfg.single_turn
    n_judges = len(cfg.judges)
    if st.model is None:
        q = st.source.limit or 120
        answers, judgments = call_count(q, len(st.baselines) or 2, n_judges)
        print(f"single_turn: no fine-tuned model set (single_turn.model=NAME, single_turn.baselines=[...]); on "
              f"CounselBench-Adv's {q} questions with {len(st.baselines) or 2} baseline(s) and {n_judges} judge(s) it "
              f"would be {answers} answers + {judgments} judgments ({q} x {len(st.baselines) or 2} x 2 orders x "
              f"{n_judges})", flush=True)
        return 0
    if not st.baselines:
        raise ConfigError(f"single_turn.model is {st.model!r} but single_turn.baselines is empty: name the models "
                          "it is compared with (the paper: CAMEL and a model tuned on Psych8k)")
    rubrics, judges = open_judging(cfg.judges, {"single_turn.rubric": st.rubric}, SUBJECT_PAIR,
                                   SINGLE_TURN_PLACEHOLDERS)
    rubric = rubrics["single_turn.rubric"]
    models = [load_model(n) for n in st.models()]
    questions, report = load_adv(st.source)
    print(report.summary() + (f" (first {st.source.limit} taken)" if st.source.limit else ""), flush=True)
    if questions.empty:
        raise ConfigError(f"{report.file}: no usable question")
    check_all(models, st.source.sensitivity, st.source.name)
    check_all(judges, st.source.sensitivity, f"{st.source.name} (the questions and the answers to them)")
    run_dir = Path(cfg.run_dir)
    store = TableStore(run_dir, RESPONSES, writer=not cfg.dry_run)
    names = st.models()
    if cfg.retry_failed and not cfg.dry_run:
        dropped = store.drop_failed({(c, m) for c in questions[CONTEXT_ID] for m in names})
        if dropped:
            print(f"resume: {dropped} failed answer(s) from an earlier run will be asked again", flush=True)
    todo = plan_answers(questions, names, store.existing_keys())
    n_answers, n_judgments = call_count(len(questions), len(st.baselines), len(judges))
    print(f"single_turn: {len(questions)} question(s) x {len(names)} model(s) = {n_answers} answers "
          f"({n_answers - len(todo)} already written, {len(todo)} to ask); then {len(questions)} x "
          f"{len(st.baselines)} baseline(s) x 2 orders x {len(judges)} judge(s) = {n_judgments} judgments; answers "
          + ("under no system prompt (the paper)" if st.system_prompt == "none" and not st.prompt.system_text() else
             f"under system prompt {st.system_prompt if st.system_prompt != 'none' else 'of prompt.system'!r} "
             "(not the paper's: it primes the models)"), flush=True)
    if cfg.dry_run:
        print(plan_text(models, todo, st.generation), flush=True)
        return 0
    _write_contexts(run_dir, questions, st.source)
    if not todo.empty:
        counts = run_model_stage(
            todo, models, GenerateStage,
            dict(system=st.answer_prompt().system_text(), user_template=st.answer_prompt().user_text(),
                 prompt_version=_prompt_version(st), generation_overrides=st.generation.as_dict(),
                 dataset=st.source.name, run_id=run_dir.name),
            store, sensitivity=st.source.sensitivity, run=cfg, desc="single-turn answers")
        code = summarize("single-turn answers", counts["ok"], counts["failed"], counts.failures,
                         cfg.max_failed_fraction, "responses", store.dir)
        if code:
            return code
    responses = store.read(columns=["context_id", "model", "response", "status"])
    planned = plan_judgments(questions, responses, st.model, list(st.baselines), cfg.judges)
    if planned.empty:
        print("warning: no question has an ok answer of the model and a baseline; nothing to judge", file=sys.stderr)
        return 1
    return judge_planned(cfg, rubric, judges, planned, st.source.sensitivity, "single-turn preference")
