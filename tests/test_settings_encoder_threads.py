"""The encoder_threads setting: default, every layer (file, environment, flag) and its checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from citerag.settings import Settings, load_settings
from test_settings import clean_env, problems, write_config  # the settings tests' own helpers (clean_env: autouse)

__all__ = ["clean_env"]


def test_default_is_every_core(tmp_path: Path) -> None:
    assert Settings().encoder_threads == 0
    assert load_settings(tmp_path / "idx").encoder_threads == 0


def test_file_then_environment_then_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "idx"
    write_config(index, "encoder_threads = 2\n")
    assert load_settings(index).encoder_threads == 2
    monkeypatch.setenv("CITERAG_ENCODER_THREADS", "1")
    assert load_settings(index).encoder_threads == 1
    assert load_settings(index, encoder_threads=4).encoder_threads == 4


@pytest.mark.parametrize(("line", "expected"), [
    ("encoder_threads = -1", "encoder_threads = -1: encoder_threads must be >= 0"),
    ("encoder_threads = 1025", "encoder_threads = 1025: encoder_threads must be <= 1024"),
    ("encoder_threads = 1.5", "encoder_threads = 1.5: expected a whole number"),
    ('encoder_threads = "all"', "encoder_threads = 'all': expected a whole number"),
    ("encoder_threads = true", "encoder_threads = True: expected a number, not true/false"),
])
def test_bad_values_name_the_setting(tmp_path: Path, line: str, expected: str) -> None:
    path = write_config(tmp_path / "idx", line + "\n")
    assert problems(tmp_path / "idx") == f"{path}: {expected}"


def test_bad_environment_value_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITERAG_ENCODER_THREADS", "two")
    assert problems(tmp_path) == "CITERAG_ENCODER_THREADS=two: expected a whole number"
    assert problems(tmp_path, encoder_threads=-2) == "flag --encoder-threads=-2: encoder_threads must be >= 0"


def test_not_a_client_setting() -> None:
    from citerag.settings import CLIENT_SETTINGS

    assert "encoder_threads" not in CLIENT_SETTINGS  # the server operator's, like the store and the queue
