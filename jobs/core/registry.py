"""The methods, found by name: `conf/method/<name>.yaml` says where a method's parts live.

A method file names the method's chain config, its steps and its report as `module:attribute`
references. The pipeline, the report command and the sweep summary look a method up here and
nowhere else, so no shared module names a method (or imports one), and a new method is a new
package plus one file in `conf/method/` (or in a `hydra.searchpath` folder: the file is found
on the config search path like every other config file).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from pydantic import Field

from jobs.core.base import StrictModel
from jobs.core.configfiles import ConfigError, find_group_file, known_names, load_group, search_dirs

__all__ = ["MethodSpec", "known_methods", "method_spec", "resolve"]

GROUP = "method"
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_REF_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class MethodSpec(StrictModel):
    """One evaluation method's parts (`conf/method/<name>.yaml`)."""

    name: str = Field(description="The method's name: experiments say `method: <name>`.")
    description: str = Field("", description="One line on what the method is.")
    chain_config: str | None = Field(
        None, description="`module:Class` of the whole-chain config (extends the shared ChainConfig); "
        "none: the shared ChainConfig.")
    steps: dict[str, str] = Field(
        default_factory=dict, description="Step name -> `module:function` taking the chain config, "
        "returning an exit code. Shared steps (generate, judge) are listed by the methods that use them.")
    report: str = Field(description="`module:function`: build_report(run_dir, out_dir=None, **options) -> report.html.")
    report_arguments: str | None = Field(
        None, description="`module:function` adding the report's command-line options to an argparse group.")
    headline: str | None = Field(
        None, description="`module:function`: headline(run_dir) -> dict of the method's own numbers (sweeps).")

    def step(self, step: str) -> Any:
        if step not in self.steps:
            raise ConfigError(f"method {self.name!r} has no step {step!r}; its steps are "
                              f"{sorted(self.steps)} (conf/method/{self.name}.yaml)")
        return resolve(self.steps[step], f"method {self.name!r} step {step!r}")


def method_spec(name: str) -> MethodSpec:
    """The method file of `name`, validated; a `ConfigError` naming the known methods otherwise."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(f"method {name!r} is not a method name (lower case, digits, _); known: "
                          f"{', '.join(known_methods()) or '(none)'}")
    spec = load_group(GROUP, name, MethodSpec)
    if spec.name != name:
        raise ConfigError(f"{find_group_file(GROUP, name)}: `name` is {spec.name!r}, the file says {name!r}")
    return spec


def known_methods() -> list[str]:
    return known_names(GROUP, search_dirs())


def resolve(ref: str, what: str = "reference") -> Any:
    """The object a `module:attribute` reference names."""
    if not _REF_RE.match(ref or ""):
        raise ConfigError(f"{what}: {ref!r} is not a `module:attribute` reference")
    module_name, attr = ref.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ConfigError(f"{what}: no module {module_name!r} (from {ref!r})") from exc
        raise
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ConfigError(f"{what}: {module_name} defines no {attr!r} (from {ref!r})") from exc
