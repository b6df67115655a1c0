"""Writing one setting into an index's config.toml (`citerag train-reranker`, a home's new collections): the line
replaced, the whole file validated before and after the edit, and the file replaced atomically."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from citerag.settings import CONFIG_NAME, Settings, SettingsError, _problems, _read_toml_text, _show


def set_in_config_file(index_dir: Path, key: str, value: str | int | float | bool) -> Path:
    """Write `key = value` into INDEX/config.toml, replacing any earlier line for it and keeping the others.

    The value is converted to the setting's type, and the file as a whole is validated before it is written.
    """
    path = index_dir / CONFIG_NAME
    fields = set(Settings.model_fields) - {"index_dir"}
    if key not in fields:
        raise SettingsError([f"{path}: unknown setting {key}"])
    text = ""
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError([f"{path}: cannot read: {exc}"]) from exc
    old, problems = _read_toml_text(path, text, fields)
    if problems:
        raise SettingsError(problems)
    try:
        typed = getattr(Settings.model_validate({"index_dir": index_dir, key: value}), key)
    except ValidationError as exc:
        raise SettingsError(_problems(exc, {key: f"{key} = {_show(key, value)}"})) from exc
    assignment = re.compile(rf"^\s*{re.escape(key)}\s*=")
    lines = [line for line in text.splitlines() if not assignment.match(line)]
    lines.append(f"{key} = {_toml_literal(typed)}")
    new_text = "\n".join(lines) + "\n"
    # Check the edited text says exactly what was meant (a line-based edit could misfire on odd TOML).
    new, problems = _read_toml_text(path, new_text, fields)
    if problems or new != {**old, key: typed}:
        raise SettingsError(problems or [f"{path}: cannot set {key} by a line edit; edit the file by hand"])
    try:
        Settings.model_validate({"index_dir": index_dir, **new})
    except ValidationError as exc:
        raise SettingsError(_problems(exc, {k: f"{path}: {k} = {_show(k, v)}" for k, v in new.items()})) from exc
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(new_text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise SettingsError([f"{path}: cannot write: {exc}"]) from exc
    return path


def _toml_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SettingsError([f"cannot write {value!r} to TOML"])
        return repr(value)
    # A TOML basic string: escape quote, backslash and the control characters TOML forbids raw.
    out = []
    for ch in str(value):
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\t" or (ord(ch) >= 0x20 and ord(ch) != 0x7F):
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04X}")
    return '"' + "".join(out) + '"'
