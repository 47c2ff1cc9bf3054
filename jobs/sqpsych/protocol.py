"""Each model family's own SQPsych protocol: its prompts and its post-processing.

The paper's authors ran every model family with its own prompt files (AI-MH/questionnaire2dialogue,
`src/prompts/`, copied verbatim under Apache-2.0 in `conf/sqpsych/prompts/`) and its own
post-processing (`src/agents.py`). The variants differ in more than chat-template tokens: the
gemma / mistral / llama3 / nemotron / command therapists are told not to mention the
questionnaires, their ending rule reads "at least 20 turns before using '[/END]'", command's
prompts carry Cohere's long system preamble. A protocol file `conf/sqpsych/protocols/NAME.yaml`
names a family's three prompts, the template markers that split a file into the system and the
user message (the serving engine applies the model's own template, so the tokens themselves are
never sent), and the strings removed from each raw answer. `AuthorsRules` is the authors' handling
of an unusable answer, the same for every family: the role label required (as exactly as they
check it), the first line kept,
a client's failed line replaced by a filler, a therapist that keeps failing ending the dialogue.

Which protocol a model runs: its model file's `protocols: {sqpsych: NAME}`; a model without one
(the bundled demo model, a fine-tuned model) runs `DEFAULT_PROTOCOL`, the Qwen-2.5 prompts the
paper's main dataset was made with. The sampling is the model file's `generation` (the authors'
`src/llms.py` values, see docs/sqpsych-fidelity.md).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from typing import Literal

from pydantic import Field, field_validator

from jobs.core.base import StrictModel

from jobs.core.modelconfig import ModelConfig
from jobs.dialogue.rules import RolePolicy
from jobs.core.configfiles import ConfigError, find_file, find_group_file, read_yaml, search_dirs, validated

METHOD = "sqpsych"
PROTOCOL_GROUP = "sqpsych/protocols"
DEFAULT_PROTOCOL = "qwen-2.5"
PROMPTS = ("therapist", "client_mdd", "client_control")




class Segment(StrictModel):
    """Where one message sits in a prompt file: after `start`, up to the next `end`."""

    start: str = Field(min_length=1)
    end: str = Field(min_length=1)


class Protocol(StrictModel):
    """One model family's protocol file."""

    family: str = Field(description="The authors' name of the family (their `--model` value).")
    source: str = Field(min_length=1, description="Where the prompts and rules come from.")
    prompts: dict[str, str] = Field(description="therapist, client_mdd, client_control -> prompt file.")
    system: Segment | None = Field(None, description="The system message's markers; None: the file has none.")
    user: Segment = Field(description="The user message's markers (searched after the system message).")
    send_system: bool = Field(True, description="Send the file's system message. False where it is only the "
                              "model's own template default (Qwen2.5's), which the server adds by itself.")
    remove: list[str] = Field(default_factory=list, description="Strings removed from every raw answer "
                              "(the authors' post_process: `<|END_RESPONSE|>`, `<tool_call>`).")
    notes: str = ""

    def model_post_init(self, _context) -> None:
        missing = [p for p in PROMPTS if p not in self.prompts]
        if missing:
            raise ValueError(f"protocol {self.family!r}: prompts {missing} missing; it needs {list(PROMPTS)}")


# The client's filler lines, the authors' (src/agents.py @ fcf2665) without their "Client: " label
# (our history adds it): one list for an answer that cleans to nothing or lacks the label
# (`Client.post_process`), another for an answer that repeats an earlier client line
# (`TherapySession.run`). Their code draws with `random.choice`; ours from the dialogue and turn.
UNUSABLE_FILLERS = ["[No reply]", "[Pause and thinking]", "[Keep silent]", "[Quiet]", "I don't know what to say",
                    "I don't know"]
REPEAT_FILLERS = ["[Pause and say nothing]", "[Pause and thinking]", "[Sigh]", "[Takes a deep breath]",
                  "I don't know what to say", "I don't know"]


class AuthorsRules(StrictModel):
    """The authors' failure handling and cleaning of an answer (src/agents.py), each a switch:
    false gives the engine's own behaviour for that point (docs/sqpsych-fidelity.md)."""

    role_label: Literal["exact", "tolerant", "off"] = Field(
        "exact", description="An answer must carry its role label (\"Therapist:\" / \"Client:\"). exact: as the "
        "authors check it, case and spacing as written (`startswith(\"Therapist:\")` after their "
        "`(Therapist: .+)` match; jobs/dialogue/rules.py `exact_label`); tolerant: any case and markdown "
        "(\"**therapist**:\", \"THERAPIST :\"), so fewer retries, fillers and abandons; off: a line without it "
        "is kept. true / false read as exact / off.")
    first_line: bool = Field(True, description="Keep only the first line from the label on (the authors' "
                             "`(Client: .+)` match stops at the line's end). false: every line is kept.")
    client_filler: bool = Field(True, description="A client answer that is empty, unlabeled or repeats an earlier "
                                "client line is replaced at once by a filler line (the authors never ask the "
                                "client again). false: asked again up to max_regenerations times, then kept.")
    abandon_therapist: bool = Field(True, description="A therapist answer that fails (repeated or unusable) on "
                                    "the first call and its max_regenerations - 1 retries ends the dialogue as an "
                                    "error row with the reason: the authors' `max_attempts` loop makes a last retry "
                                    "it never reads and raises, losing the dialogue. false: asked again up to "
                                    "max_regenerations times, then the last answer is kept.")
    unusable_fillers: list[str] = Field(default_factory=lambda: list(UNUSABLE_FILLERS), min_length=1,
                                        description="Fillers for an empty or unlabeled client answer.")
    repeat_fillers: list[str] = Field(default_factory=lambda: list(REPEAT_FILLERS), min_length=1,
                                      description="Fillers for a client answer that repeats an earlier one.")

    @field_validator("role_label", mode="before")
    @classmethod
    def _bool_label(cls, value: object) -> object:
        return {True: "exact", False: "off"}.get(value, value) if isinstance(value, bool) else value

    def policies(self, therapist: str, client: str, max_regenerations: int) -> dict[str, RolePolicy]:
        """The engine's per-role policies these switches make. `max_regenerations` is the authors'
        `max_attempts` (10): their loop regenerates, counts, and raises once the count reaches it,
        so the answer of the last retry is never read. The dialogue is lost after the first answer
        and max_attempts - 1 retries failed; the same outcome here is that many retries, without
        the call whose answer nobody reads."""
        cleaning = dict(require_label=self.role_label != "off", first_line=self.first_line,
                        label_match="exact" if self.role_label == "exact" else "tolerant")
        if self.abandon_therapist:
            policy = RolePolicy(**cleaning, retries=max(0, max_regenerations - 1), on_repeat="error",
                                on_unusable="error")
        else:
            policy = RolePolicy(**cleaning, on_repeat="keep", on_unusable="keep")
        out = {therapist: policy}
        if self.client_filler:
            out[client] = RolePolicy(**cleaning, retries=0, on_repeat="filler", on_unusable="filler",
                                     repeat_fillers=self.repeat_fillers, unusable_fillers=self.unusable_fillers)
        else:
            out[client] = RolePolicy(**cleaning, on_repeat="keep", on_unusable="keep")
        return out


def split_messages(text: str, protocol: Protocol, where: str = "prompt") -> tuple[str | None, str]:
    """(system, user) of a prompt file written with its family's template tokens; every other
    template token is dropped. Raises `ConfigError` naming the file when a marker is missing."""
    pos, system = 0, None
    if protocol.system is not None:
        start = text.find(protocol.system.start)
        if start >= 0:
            begin = start + len(protocol.system.start)
            end = text.find(protocol.system.end, begin)
            if end < 0:
                raise ConfigError(f"{where}: no {protocol.system.end!r} after the system marker")
            system, pos = text[begin:end].strip(), end + len(protocol.system.end)
    start = text.find(protocol.user.start, pos)
    if start < 0:
        raise ConfigError(f"{where}: no user marker {protocol.user.start!r} (protocol {protocol.family!r})")
    begin = start + len(protocol.user.start)
    end = text.find(protocol.user.end, begin)
    if end < 0:
        raise ConfigError(f"{where}: no {protocol.user.end!r} after the user marker (protocol {protocol.family!r})")
    return system or None, text[begin:end].strip() + "\n"


@lru_cache(maxsize=32)
def _load(name: str, dirs: tuple[Path, ...]) -> Protocol:
    path = find_group_file(PROTOCOL_GROUP, name, list(dirs))
    return validated(Protocol, read_yaml(path), f"protocol file {path}")


def load_protocol(name: str, dirs: list[Path] | None = None) -> Protocol:
    """`conf/sqpsych/protocols/NAME.yaml` (a `hydra.searchpath` folder may shadow it)."""
    return _load(name, tuple(dirs if dirs is not None else search_dirs()))


def protocol_name(model: ModelConfig, override: str | None = None) -> str:
    """The protocol `model` runs: the job's override, its model file's, else the default."""
    return override or model.protocols.get(METHOD) or DEFAULT_PROTOCOL


def prompt_messages(protocol: Protocol, prompt: str) -> tuple[str | None, str]:
    """The (system, user) templates of one of the protocol's prompts (system None when the
    protocol does not send it)."""
    path = find_file(protocol.prompts[prompt], what=f"protocol {protocol.family} prompt {prompt}")
    system, user = split_messages(path.read_text(encoding="utf-8"), protocol, str(path))
    return (system if protocol.send_system else None), user
