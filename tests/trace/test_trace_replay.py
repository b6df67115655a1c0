"""`citerag replay ID`: a question asked before a document changed, asked again against today's index; exactly the
changed passage is reported (the old chunk removed, the new one added), the unchanged one is not."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from trace_fixtures import ASKED, NOTES_V1, NOTES_V2, open_app

from citerag.app.models import AskOptions, Filters
from citerag.cli import cli
from citerag.config_file import set_in_config_file
from citerag.ingest.files import Source


def test_replay_after_a_document_change_shows_exactly_the_changed_hits(
        tmp_path: Path, exported: InMemorySpanExporter) -> None:
    index = tmp_path / "index"
    with open_app(index, trace_text=True) as app:
        app.index_document(Source("notes.md", NOTES_V1.encode()))
        before = app.ask(ASKED)
        assert not before.refused and before.trace_id
        old = {h.chunk.content: h.chunk.id for h in app.search("Quillby Island").hits}
        app.index_document(Source("notes.md", NOTES_V2.encode()))  # replaced in place: same document
        new = {h.chunk.content: h.chunk.id for h in app.search("Quillby Island").hits}
    removed = [i for content, i in old.items() if "Tuesday" in content]
    added = [i for content, i in new.items() if "storm bell" in content]
    unchanged = [content for content in old if content in new]
    assert len(removed) == len(added) == 1 and len(unchanged) == len(old) - 1 >= 1

    set_in_config_file(index, "trace_text", True)  # what the CLI reads (the collection allows the text)
    runner = CliRunner()
    shown = runner.invoke(cli, ["trace", "show", before.trace_id, "--index", str(index)])
    assert shown.exit_code == 0, shown.output
    assert "citerag.gate" in shown.output and "citerag.gate.decision = \"answered\"" in shown.output

    result = runner.invoke(cli, ["replay", before.trace_id, "--index", str(index)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert f"hits: 1 added, 1 removed, 0 moved, {len(unchanged)} unchanged" in lines
    assert [line.split()[3] for line in lines if line.startswith("  - removed")] == [str(removed[0])]
    assert [line.split()[3] for line in lines if line.startswith("  + added")] == [str(added[0])]
    assert any(line.startswith("gate: answered -> answered") for line in lines)
    assert "answer:" in lines and any("storm bell" in line and line.lstrip().startswith("+") for line in lines)
    assert any("Tuesday" in line and line.lstrip().startswith("-") for line in lines)


def test_replay_of_an_unknown_trace_is_one_line(tmp_path: Path) -> None:
    open_app(tmp_path).close()
    result = CliRunner().invoke(cli, ["replay", "0" * 32, "--index", str(tmp_path)])
    assert result.exit_code != 0 and "no trace" in str(result.exception)


def test_a_filtered_question_is_replayed_with_its_filters(tmp_path: Path, exported: InMemorySpanExporter) -> None:
    index = tmp_path / "index"
    with open_app(index, trace_text=True) as app:
        app.index_document(Source("notes.md", NOTES_V1.encode()))
        app.index_document(Source("other.md", b"# Other\n\nQuillby Island has a lighthouse on its north cape.\n"))
        filtered = app.ask(ASKED, AskOptions(filters=Filters.parse({"path": "other.md"})))
        assert filtered.trace_id and all(c.document_name == "other.md" for c in filtered.citations)
        kept = app.collection().trace(filtered.trace_id)
        assert kept is not None and kept["options"]["filters"] == {"path": ["other.md"]}
    set_in_config_file(index, "trace_text", True)
    result = CliRunner().invoke(cli, ["replay", filtered.trace_id, "--index", str(index)])
    assert result.exit_code == 0, result.output
    # Asked again with the same filter: the same hits (notes.md, never allowed, is not among them).
    assert "hits: unchanged (1)" in result.output.splitlines(), result.output
