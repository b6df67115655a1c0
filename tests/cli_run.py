"""The command line run in this process, as a user meets it: its exit status and what it printed. A plain module
(not conftest): `from cli_run import run, assert_one_line_error`."""

from __future__ import annotations

import sys

import pytest

from citerag.cli import main


def run(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["citerag", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(result: tuple[int, str, str], pattern: str) -> None:
    code, _, err = result
    assert code != 0
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and pattern in lines[0], err
