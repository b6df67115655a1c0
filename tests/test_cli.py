"""The command line as a user meets it: JSON shapes, and one-line errors with a non-zero exit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from citerag.cli import main
from cli_run import assert_one_line_error, run
from corpus_paths import DATA, DEV_SET, reference_chunks

CITATION_KEYS = {"index", "document_id", "document_name", "source_path", "locator_label", "section", "fragment",
                 "start", "end", "quote", "cosine_distance"}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs")
    for name in ("ch08.en.html", "apa.en.html"):
        shutil.copy(DEV_SET / "corpus" / name, folder / name)
    (folder / "broken.md").write_bytes(b"\x00\x01\x02 binary")
    ix = tmp_path_factory.mktemp("ix")
    mp = pytest.MonkeyPatch()
    mp.setattr(sys, "argv", ["citerag", "ingest", str(folder), "--index", str(ix)])
    main()
    mp.undo()
    return ix


def test_ask_json_shape(index: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(["ask", "How do I make a locale available to the system?", "--index", str(index), "--json"],
                       capsys, monkeypatch)
    data = json.loads(out)
    # These keys stay; new ones (check, generator, timings_ms) may be added.
    assert code == 0 and set(data) >= {"question", "refused", "answer", "citations"}
    assert data["refused"] is False and data["citations"]
    for c in data["citations"]:
        assert set(c) == CITATION_KEYS and c["fragment"] == f"#char={c['start']},{c['end']}"


def test_ask_refusal_text(index: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    q = "Which wine goes best with grilled salmon?"
    code, out, _ = run(["ask", q, "--index", str(index), "--json"], capsys, monkeypatch)
    data = json.loads(out)
    assert code == 0 and data["refused"] is True and data["citations"] == []
    # The ingest calibrated the collection's refusal rule: the refusal names its cut.
    cut = json.loads(run(["status", "--index", str(index), "--json"], capsys, monkeypatch)[1])["refusal"]["threshold"]
    assert data["answer"] == f'NO ANSWER: nothing under cosine distance {cut:g} (calibrated rule) for "{q}"'
    code, out, _ = run(["ask", q, "--index", str(index)], capsys, monkeypatch)
    assert out.strip() == data["answer"]


def test_ask_show_prompt(index: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(["ask", "What is the document revision history?", "--index", str(index), "--show-prompt"],
                       capsys, monkeypatch)
    assert code == 0 and "Cite every claim as [n]" in out and "If the sources do not contain the answer" in out
    assert "Sources:" in out and "#char=" in out


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_search_json_shape(index: Path, capsys, monkeypatch, mode: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(["search", "locale generation", "--index", str(index), "--mode", mode, "--k", "5", "--json"],
                       capsys, monkeypatch)
    rows = json.loads(out)
    assert code == 0 and 0 < len(rows) <= 5
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    for r in rows:
        assert set(r) == CITATION_KEYS | {"rank", "score"}


def test_status_shows_indexed_and_failed(index: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(["status", "--index", str(index), "--json"], capsys, monkeypatch)
    data = json.loads(out)
    assert code == 0 and data["counts"]["indexed"] == 2 and data["counts"]["failed"] == 1
    failed = next(d for d in data["documents"] if d["status"] == "failed")
    assert failed["name"] == "broken.md" and "binary data" in failed["error"]
    for d in data["documents"]:
        assert {"status", "error", "chunk_count", "stamps", "stale"} <= set(d)
    code, out, _ = run(["status", "--index", str(index)], capsys, monkeypatch)
    assert "reason: binary data" in out


def test_chunk_json_matches_reference(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    path = DATA / "markdown" / "debian-reference" / "ch03.md"
    code, out, _ = run(["chunk", str(path), "--strategy", "E", "--json"], capsys, monkeypatch)
    chunks = json.loads(out)
    reference = reference_chunks()["ch03.md"]
    assert code == 0 and chunks[-len(reference):] == reference
    assert all(set(c) == {"text", "content", "section", "start", "end"} for c in chunks)
    code, out, _ = run(["chunk", str(path), "--strategy", "A", "--title", "Boot", "--target", "300", "--json"],
                       capsys, monkeypatch)
    assert all(len(c["content"]) <= 300 for c in json.loads(out))


def test_errors_are_one_line(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(run(["ingest", str(tmp_path / "nope"), "--index", str(tmp_path / "ix")],
                              capsys, monkeypatch), "no such file or directory")
    (tmp_path / "empty").mkdir()
    assert_one_line_error(run(["ingest", str(tmp_path / "empty"), "--index", str(tmp_path / "ix")],
                              capsys, monkeypatch), "no documents under")
    assert_one_line_error(run(["ask", "anything?", "--index", str(tmp_path / "none")], capsys, monkeypatch),
                          "no index at")
    # An index that exists but holds nothing searchable.
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "empty.md").write_text("")
    assert run(["ingest", str(tmp_path / "bad"), "--index", str(tmp_path / "ix2")], capsys, monkeypatch)[0] == 0
    assert_one_line_error(run(["ask", "anything?", "--index", str(tmp_path / "ix2")], capsys, monkeypatch),
                          "has no indexed documents")
    (tmp_path / "afile").write_text("x")
    assert_one_line_error(run(["status", "--index", str(tmp_path / "afile")], capsys, monkeypatch),
                          "is not a directory")
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "index.sqlite3").write_bytes(b"garbage" * 1000)
    assert_one_line_error(run(["search", "x", "--index", str(tmp_path / "corrupt")], capsys, monkeypatch),
                          "cannot open index")
    (tmp_path / "corrupt2").mkdir()
    (tmp_path / "corrupt2" / "config.toml").write_text("strategy = [unclosed")
    assert_one_line_error(run(["ingest", str(tmp_path / "bad"), "--index", str(tmp_path / "corrupt2")],
                              capsys, monkeypatch), "config.toml: invalid TOML")
    assert_one_line_error(run(["ask", "   ", "--index", str(tmp_path / "ix2")], capsys, monkeypatch),
                          "question is empty")


def test_installed_command_runs() -> None:
    exe = shutil.which("citerag") or str(Path(sys.executable).parent / "citerag")
    done = subprocess.run([exe, "ingest", "/nonexistent/path"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.strip() == "error: no such file or directory: /nonexistent/path"


def test_a_wrong_path_leaves_no_index_behind(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(run(["ingest", str(tmp_path / "nothere"), "--index", str(tmp_path / "x")],
                              capsys, monkeypatch), "no such file or directory")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("line, name", [
    ('threshold = "abc"', "threshold"), ("strategy = 5", "strategy"), ('target = "abc"', "target"),
    ('max_file_mb = "x"', "max_file_mb"), ("overlap = 600", "overlap"), ("k = -5", "k"),
    ("max_sources = 0", "max_sources"), ("threshold = nan", "threshold")])
def test_bad_settings_are_one_line_naming_the_setting(line: str, name: str, tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                      monkeypatch) -> None:
    ix = tmp_path / "ix"
    ix.mkdir()
    (ix / "config.toml").write_text(line + "\n")
    doc = tmp_path / "ch04.md"
    shutil.copy(DATA / "markdown" / "debian-reference" / "ch04.md", doc)
    for args in (["ingest", str(doc)], ["ask", "How do I change a password?"], ["status"]):
        assert_one_line_error(run([*args, "--index", str(ix)], capsys, monkeypatch), f"{name} = ")
    assert sorted(p.name for p in ix.iterdir()) == ["config.toml"]  # nothing was opened or created


def test_a_file_name_that_is_not_utf8_fails_alone(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(DATA / "markdown" / "debian-reference" / "ch04.md", docs / "ch04.md")
    bad = os.path.join(os.fsencode(docs), b"\xffbad.md")
    with open(bad, "wb") as f:
        f.write(b"## Notes\nA file whose name is not UTF-8.\n")
    code, out, err = run(["ingest", str(docs), "--index", str(tmp_path / "ix"), "--json"], capsys, monkeypatch)
    report = json.loads(out)
    assert code == 0 and "Traceback" not in err
    assert [Path(p).name for p in report["indexed"]] == ["ch04.md"]
    (failed,) = report["failed"]
    assert failed["source_path"].endswith("\\xffbad.md") and "not valid UTF-8" in failed["error"]
    code, out, _ = run(["status", "--index", str(tmp_path / "ix"), "--json"], capsys, monkeypatch)
    assert json.loads(out)["counts"] == {"indexed": 1, "failed": 1, "pending": 0, "stale": 0}


def test_search_and_ask_take_filters(index: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    question = "How do I make a locale available to the system?"  # answered in ch08
    code, out, _ = run(["search", question, "--index", str(index), "--json", "--k", "15", "--filter", "path=**/apa*"],
                       capsys, monkeypatch)
    rows = json.loads(out)
    _, status, _ = run(["status", "--index", str(index), "--json"], capsys, monkeypatch)
    apa = next(d for d in json.loads(status)["documents"] if d["name"] == "apa.en.html")
    # Every chunk of the one document allowed, or 15 of them: never fewer than match.
    assert code == 0 and len(rows) == min(15, apa["chunk_count"]) and {r["document_name"] for r in rows} == \
        {"apa.en.html"}
    code, out, _ = run(["search", question, "--index", str(index), "--json", "--filter", "type=pdf",
                        "--filter", "type=docx"], capsys, monkeypatch)
    assert code == 0 and json.loads(out) == []
    code, out, _ = run(["ask", question, "--index", str(index), "--json", "--filter", "path=**/apa*"],
                       capsys, monkeypatch)
    data = json.loads(out)
    assert code == 0 and all(c["document_name"] == "apa.en.html" for c in data["citations"])
    code, out, _ = run(["ask", question, "--index", str(index), "--json", "--filter", "path=**/ch08*",
                        "--filter", "source=local", "--filter", "language=en"], capsys, monkeypatch)
    data = json.loads(out)
    assert not data["refused"] and {c["document_name"] for c in data["citations"]} == {"ch08.en.html"}
    assert_one_line_error(run(["search", "x", "--index", str(index), "--filter", "type=exe"], capsys, monkeypatch),
                          "error: --filter.type: 'exe' is not a type; known: csv, docx")
    assert_one_line_error(run(["ask", "x", "--index", str(index), "--filter", "pdf"], capsys, monkeypatch),
                          "error: --filter: 'pdf' is not KEY=VALUE")


def test_tags_set_from_the_command_line_filter_the_next_search(index: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    question = "How do I make a locale available to the system?"
    _, status, _ = run(["status", "--index", str(index), "--json"], capsys, monkeypatch)
    ch08 = next(d for d in json.loads(status)["documents"] if d["name"] == "ch08.en.html")
    search = ["search", question, "--index", str(index), "--json", "--filter", "tags=locales"]
    assert json.loads(run(search, capsys, monkeypatch)[1]) == []
    code, out, _ = run(["tag", ch08["source_path"], "locales", "debian", "locales", "--index", str(index)],
                       capsys, monkeypatch)
    assert code == 0 and out.strip() == f"{ch08['source_path']}: locales debian"
    assert {r["document_name"] for r in json.loads(run(search, capsys, monkeypatch)[1])} == {"ch08.en.html"}
    code, out, _ = run(["tag", str(ch08["id"]), "--index", str(index), "--json"], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["tags"] == []
    assert json.loads(run(search, capsys, monkeypatch)[1]) == []
    assert_one_line_error(run(["tag", str(ch08["id"]), "two words", "--index", str(index)], capsys, monkeypatch),
                          "error: TAGS: 'two words' is not a tag")
    assert_one_line_error(run(["tag", "/no/such/file.md", "x", "--index", str(index)], capsys, monkeypatch),
                          "error: no document '/no/such/file.md' in")


def test_a_question_that_is_not_utf8_is_one_line(index: Path) -> None:
    exe = shutil.which("citerag") or str(Path(sys.executable).parent / "citerag")
    done = subprocess.run([exe, "ask", b"apt \xff sources", "--index", str(index)], capture_output=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.decode().strip() == "error: the question is not valid UTF-8"


def test_a_full_disk_stops_ingest_with_one_line(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A real SQLITE_FULL (the database may not grow past a few more pages): exit 1, one line, no document failed."""
    import sqlite3

    import citerag.store.sqlite as backend

    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("ch04.md", "ch05.md"):
        shutil.copy(DATA / "markdown" / "debian-reference" / name, docs / name)
    ix = tmp_path / "ix"
    assert run(["ingest", str(docs / "ch04.md"), "--index", str(ix)], capsys, monkeypatch)[0] == 0
    connect = sqlite3.connect

    def small_disk(*args, **kwargs):  # type: ignore[no-untyped-def]
        db = connect(*args, **kwargs)
        db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0] + 2}")
        return db

    monkeypatch.setattr(backend.sqlite3, "connect", small_disk)
    assert_one_line_error(run(["ingest", str(docs), "--index", str(ix)], capsys, monkeypatch),
                          "database or disk is full")
    monkeypatch.setattr(backend.sqlite3, "connect", connect)
    code, out, _ = run(["status", "--index", str(ix), "--json"], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["counts"] == {"indexed": 1, "failed": 0, "pending": 1, "stale": 0}
    code, out, _ = run(["retry", "--index", str(ix), "--json"], capsys, monkeypatch)
    assert code == 0 and [Path(p).name for p in json.loads(out)["indexed"]] == ["ch05.md"]
