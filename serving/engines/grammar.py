"""The GBNF grammar that holds a CPU engine's answer to a request's `response_format`.

Both CPU engines (in-process llama-cpp-python and llama-server) decode under the same grammar,
made here once:
- `json_schema`: llama-cpp-python's schema converter, which allows one optional space between
  tokens (llama-server's own converter allows newlines and up to 20 spaces, which the 270M model
  takes, spending its budget on indentation);
- `json_object`: llama-cpp-python's generic JSON grammar.

One correction to the converter: its string characters are `[^"\\]`, so a raw newline or tab
could sit inside a JSON string, which JSON forbids (`json.loads` refuses it; the bundled model
did it in about 1 judge answer of 8, `docs/benchmarks.md`). Strings here take what JSON allows:
no `"`, no backslash except in an escape, no control character (U+0000-U+001F, as llama.cpp's
own JSON grammar also excludes U+007F).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

__all__ = ["STRING_CHAR", "response_grammar"]

_CONVERTER_CHAR = 'char ::= [^"\\\\] |'
STRING_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'


@lru_cache(maxsize=256)
def _schema_grammar(schema_json: str) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf  # llama.cpp's bindings: the engines' own dependency

    gbnf = json_schema_to_gbnf(schema_json)
    if _CONVERTER_CHAR in gbnf:
        gbnf = gbnf.replace(_CONVERTER_CHAR, STRING_CHAR)
    elif "char ::=" in gbnf and STRING_CHAR not in gbnf:
        # A converter whose string rule changed: fail loudly rather than decode under a rule
        # nobody checked (tests/unit/serving/test_grammar.py says what the rule must be).
        raise RuntimeError("llama_cpp's JSON-schema converter changed its string rule; update "
                           "serving/engines/grammar.py")
    return gbnf


def response_grammar(response_format: Any) -> str | None:
    """The GBNF for a request's `response_format` (`serving.protocol.ResponseFormat`), or None."""
    if response_format is None:
        return None
    if response_format.type == "json_schema" and response_format.json_schema is not None:
        # Not sort_keys: the grammar writes the properties in the schema's order (a rubric puts its
        # items first and the explanation last, so a short budget still holds the scores).
        return _schema_grammar(json.dumps(response_format.json_schema.schema_))
    if response_format.type == "json_object":
        from llama_cpp.llama_grammar import JSON_GBNF

        return JSON_GBNF
    return None
