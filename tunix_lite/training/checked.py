"""Checked configs: dataclasses whose every value is typed and range-checked however they are built
(a YAML file, a dict, Python), with one line naming the key, the value and what is expected.

    @dataclasses.dataclass
    class EvalSpec(Checked):
        n_prompts: int = option(64, "held-out prompts", ge=1)

    EvalSpec.from_dict({"n_prompts": 0}, where="evaluation")
        # ConfigError: evaluation.n_prompts: must be >= 1, got 0

Numbers PyYAML reads as strings (`1e-3`: YAML 1.1 wants a dot) are converted. Each field also says
whether a resumed run may change it (`resume`: "same", "free" or "grow"). A field typed as another
Checked class is a section of its own. `apply_settings` applies the command line's `--set KEY=VALUE`
to a file's mapping before the checks. The run configs (tunix_lite.training.config) and a pipeline
file's sections (tunix_lite.pipeline.spec) are built on this.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from tunix_lite import configs

RESUME_RULES = ("same", "free", "grow")  # must not change | may change | may only grow


# keys that older configs use, and what replaced them: named in the one-line error
RENAMED = {"tensorboard": "report_to: [tensorboard]"}


class ConfigError(ValueError):
    """A config value that is missing, unknown, of the wrong type or out of range."""


def option(default, help: str, *, ge=None, gt=None, le=None, lt=None, resume: str = "same"):
    """A config field: its default (a Checked class: that section with its own defaults), a one-line
    help, an allowed range, and what a resumed run may do with it."""
    assert resume in RESUME_RULES, resume
    metadata = {"help": help, "ge": ge, "gt": gt, "le": le, "lt": lt, "resume": resume}
    if isinstance(default, type):
        return dataclasses.field(default_factory=default, metadata=metadata)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# ------------------------------------------------------------------------- checked dataclasses


class Checked:
    """A dataclass whose every value is converted to its field's type and range-checked however
    it is built (YAML, a dict, or Python: `SFTConfig(lora_rank=0)` is refused as `lora_rank: 0` in
    a file is), then checked by each class's own `check()`, the bases' first: every part checks
    only its own fields and may rely on its bases' rules holding. A field typed as another Checked
    class is a section of its own, built from a nested mapping."""

    @classmethod
    def fields(cls) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(cls)}

    @classmethod
    def key_kind(cls) -> str:
        """What an unknown key is not, in its error."""
        return "a key here"

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = ""):
        """Build and check one from a mapping. `where`: the key the mapping sits under in its file
        (e.g. "data"), which every error then names (data.n_train: ...)."""
        prefix = f"{where}." if where else ""
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: expected a mapping of keys, got {type(values).__name__}")
        fields = cls.fields()
        unknown = [k for k in values if k not in fields]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = (f" (did you mean {close[0]!r}?)" if close
                    else f"; valid keys: {', '.join(fields)}")
            if key in RENAMED:
                hint = f"; it became {RENAMED[key]}"
            raise ConfigError(f"{prefix}{key}: not {cls.key_kind()}{hint}")
        try:
            return cls(**values)  # __post_init__ checks every value
        except ConfigError as e:
            raise ConfigError(f"{prefix}{e}") from None

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for name, f in self.fields().items():
            value = _coerce(name, getattr(self, name), hints[name])
            _check_range(name, value, f.metadata)
            setattr(self, name, value)
        self.validate()

    def validate(self) -> None:
        """Each class's own check() in turn, from the first base to this class."""
        for cls in reversed(type(self).__mro__):
            check = vars(cls).get("check")
            if check is not None:
                check(self)


def _is_section(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, Checked)


def type_name(hint) -> str:
    origin, args = get_origin(hint), get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin is Literal:
        return " | ".join(map(repr, args))
    if origin is list:
        return f"a list of {type_name(args[0])}"
    if origin is dict:
        return f"a mapping of {type_name(args[0])} to {type_name(args[1])}"
    if _is_section(hint):
        return f"a mapping of {hint.__name__} keys"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string",
            type(None): "null", Any: "anything"}.get(hint, str(hint))


def _coerce(key: str, value, hint):
    """`value` as the type `hint` describes, or a ConfigError naming key, value and what is
    expected."""
    origin, args = get_origin(hint), get_args(hint)

    def wrong():
        shown = (type(value).__name__ if isinstance(value, (dict, list))
                 else f"{value!r} ({type(value).__name__})")
        return ConfigError(f"{key}: expected {type_name(hint)}, got {shown}")

    if hint is Any:
        return value
    if _is_section(hint):
        return value if isinstance(value, hint) else hint.from_dict(value, where=key)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        section = next((a for a in args if _is_section(a)), None)
        if section is not None and isinstance(value, (dict, section)):  # its own errors, not ours
            return _coerce(key, value, section)
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(key, value, arg)
            except ConfigError:
                pass
        raise wrong()
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not supported; choose one of "
                              f"{', '.join(map(repr, args))}")
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise wrong()
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
            return int(value)
        raise wrong()
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:  # PyYAML reads 1e-3 (no dot) as a string
                number = float(value)
            except ValueError:
                raise wrong() from None
        else:
            raise wrong()
        if not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return number
    if hint is str:
        if isinstance(value, str):
            return value
        raise wrong()
    if origin is list:
        if not isinstance(value, list):
            raise wrong()
        return [_coerce(f"{key}[{i}]", v, args[0]) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise wrong()
        return {_coerce(f"{key} key", k, args[0]): _coerce(f"{key}[{k!r}]", v, args[1])
                for k, v in value.items()}
    raise TypeError(f"config field {key}: unsupported annotation {hint}")


RANGES = (("ge", ">=", lambda x, bound: x >= bound), ("gt", ">", lambda x, bound: x > bound),
          ("le", "<=", lambda x, bound: x <= bound), ("lt", "<", lambda x, bound: x < bound))


def _check_range(key: str, value, meta: dict) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    for name, words, holds in RANGES:
        if meta[name] is not None and not holds(value, meta[name]):
            raise ConfigError(f"{key}: must be {words} {meta[name]}, got {value}")


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A config file's mapping (`path`: a file, or the name of a config shipped in
    tunix_lite.configs); one line naming the file when it is missing or not a YAML mapping."""
    path = configs.find(path)
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys, got {type(values).__name__}")
    return values


SET_EXAMPLE = "e.g. --set learning_rate=3e-4 or --set stages.2.steps=50"


def apply_settings(values: dict[str, Any], settings: list[str]) -> dict[str, Any]:
    """A copy of a file's mapping with each command-line `--set KEY=VALUE` applied, before the
    checks: so a setting is typed, checked and saved exactly as the same value in the file would be.
    KEY is a dotted path into nested mappings and lists (`stages.2.steps`); VALUE is read as YAML,
    like the file."""
    values = copy.deepcopy(values)
    for setting in settings:
        path, value = _parse_setting(setting)
        _assign(values, path, value, setting)
    return values


def _parse_setting(setting: str) -> tuple[list[str], Any]:
    key, equals, text = setting.partition("=")
    if not equals:
        raise ConfigError(f"--set {setting}: expected KEY=VALUE, {SET_EXAMPLE}")
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {setting}: the key is empty; expected KEY=VALUE, {SET_EXAMPLE}")
    path = key.split(".")
    if not all(path):
        raise ConfigError(f"--set {setting}: {key!r} has an empty part between dots; {SET_EXAMPLE}")
    try:
        return path, yaml.safe_load(text)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", e)
        raise ConfigError(f"--set {setting}: the value is not valid YAML ({problem}); write it as "
                          "in the file, e.g. --set 'domains=[sort, count]'") from None


def _assign(values: dict, path: list[str], value, setting: str) -> None:
    """Set values[path[0]][path[1]]... = value. A missing (or null) mapping on the way is created,
    so an unknown key reaches the checks, which name it as they do in a file."""
    container = values
    for depth, part in enumerate(path):
        where = ".".join(path[:depth])
        if isinstance(container, list):
            part = _list_index(container, part, where, setting)
        elif not isinstance(container, dict):
            raise ConfigError(f"--set {setting}: {where} is {container!r}, not a mapping or a "
                              f"list; set it whole (--set {where}=VALUE)")
        if depth == len(path) - 1:
            container[part] = value
            return
        if isinstance(container, dict) and container.get(part) is None:
            container[part] = {}
        container = container[part]


def _list_index(items: list, part: str, where: str, setting: str) -> int:
    indices = f"0 to {len(items) - 1}" if items else "none: it is empty"
    if not part.isdigit():
        raise ConfigError(f"--set {setting}: {where} is a list; index it with a number ({indices})")
    if int(part) >= len(items):
        raise ConfigError(f"--set {setting}: {where} has {len(items)} items, index {part} is out "
                          f"of range ({indices})")
    return int(part)
