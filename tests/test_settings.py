"""Settings: validation, the layered loader's precedence and error messages, and the config-file edit."""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from citerag.config_file import set_in_config_file
from citerag.errors import CiteragError
from citerag.settings import Settings, SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No CITERAG_* variable from the caller's shell, and the working directory in tmp_path."""
    for name in list(os.environ):
        if name.startswith("CITERAG_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_config(index: Path, text: str) -> Path:
    index.mkdir(parents=True, exist_ok=True)
    path = index / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def problems(index: Path | None = None, **flags: Any) -> str:
    with pytest.raises(SettingsError) as info:
        load_settings(index, **flags)
    assert isinstance(info.value, CiteragError)  # the CLI prints it as one message, not a traceback
    return str(info.value)


def test_defaults_match_the_old_config(tmp_path: Path) -> None:
    s = load_settings(tmp_path / "idx")
    assert (s.strategy, s.target, s.overlap, s.threshold, s.mode, s.k, s.max_sources) == ("E", 512, 64, 0.675,
                                                                                            "adaptive", 20, 4)
    assert (s.generator, s.generator_timeout, s.generator_retries, s.collection) == ("extractive", 60.0, 3, "default")
    assert s.index_dir == tmp_path / "idx"


def test_precedence_file_env_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "idx"
    write_config(index, 'threshold = 0.4\nk = 7\nstrategy = "B"\nmode = "bm25"\n')
    s = load_settings(index)
    assert (s.threshold, s.k, s.strategy, s.mode) == (0.4, 7, "B", "bm25")

    monkeypatch.setenv("CITERAG_THRESHOLD", "0.5")
    monkeypatch.setenv("CITERAG_STRATEGY", "C")
    monkeypatch.setenv("CITERAG_OPENAI_STREAM", "true")
    s = load_settings(index)
    assert (s.threshold, s.k, s.strategy, s.mode, s.openai_stream) == (0.5, 7, "C", "bm25", True)

    s = load_settings(index, threshold=0.6, k=None, mode="hybrid")  # None = flag not given
    assert (s.threshold, s.k, s.strategy, s.mode) == (0.6, 7, "C", "hybrid")


def test_unrelated_env_vars_are_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITERAG_DEBUG", "1")
    monkeypatch.setenv("CITERAG_NO_SUCH_SETTING", "x")
    monkeypatch.setenv("CITERAG_INDEX_DIR", "/elsewhere")  # the index dir's variable is CITERAG_HOME
    assert load_settings(tmp_path / "idx") == Settings(index_dir=tmp_path / "idx")


def test_citerag_home_and_default_index_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().index_dir == Path(".citerag")
    home = tmp_path / "home"
    write_config(home, "k = 9\n")
    monkeypatch.setenv("CITERAG_HOME", str(home))
    s = load_settings()
    assert (s.index_dir, s.k) == (home, 9)
    assert load_settings(tmp_path / "flag").index_dir == tmp_path / "flag"  # the flag beats $CITERAG_HOME


def test_explicit_config_file_replaces_the_index_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "idx"
    write_config(index, "k = 5\n")
    other = tmp_path / "other.toml"
    other.write_text("k = 6\n", encoding="utf-8")
    assert load_settings(index, config_file=other).k == 6
    monkeypatch.setenv("CITERAG_CONFIG", str(other))
    assert load_settings(index).k == 6
    missing = tmp_path / "missing.toml"
    with pytest.raises(SettingsError, match="missing.toml: cannot read"):
        load_settings(index, config_file=missing)


@pytest.mark.parametrize(("line", "expected"), [
    ('threshold = "abc"', "threshold = 'abc': expected a number"),
    ("strategy = 5", "strategy = 5: expected one of A, B, C, D, E, F, G"),
    ('strategy = "e"', "strategy = 'e': expected one of A, B, C, D, E, F, G"),
    ('target = "abc"', "target = 'abc': expected a whole number"),
    ('max_file_mb = "x"', "max_file_mb = 'x': expected a number"),
    ("overlap = 600", "overlap = 600: overlap must be less than target (512)"),
    ("k = -5", "k = -5: k must be >= 1"),
    ("k = 1001", "k = 1001: k must be <= 1000"),
    ("k = 2.5", "k = 2.5: expected a whole number"),
    ("k = true", "k = True: expected a number, not true/false"),
    ("max_sources = 0", "max_sources = 0: max_sources must be >= 1"),
    ("threshold = nan", "threshold = nan: expected a finite number"),
    ("threshold = 0", "threshold = 0: threshold must be > 0"),
    ("max_file_mb = inf", "max_file_mb = inf: expected a finite number"),
    ('mode = "vector"', "mode = 'vector': expected one of dense, bm25, hybrid, adaptive"),
    ('generator = "gpt"', "generator = 'gpt': expected one of extractive, llama, openai"),
    ("generator_retries = 21", "generator_retries = 21: generator_retries must be <= 20"),
    ('collection = "a/b"', "collection = 'a/b': expected 1-64 characters of A-Z a-z 0-9 . _ -"),
    ('openai_model = 3', "openai_model = 3: expected a string"),
])
def test_bad_file_value_names_setting_value_and_file(tmp_path: Path, line: str, expected: str) -> None:
    path = write_config(tmp_path / "idx", line + "\n")
    assert problems(tmp_path / "idx") == f"{path}: {expected}"


def test_every_bad_value_is_reported_once(tmp_path: Path) -> None:
    path = write_config(tmp_path / "idx", 'threshold = "abc"\nk = -5\nmax_sources = 0\n')
    assert problems(tmp_path / "idx").splitlines() == [
        f"{path}: threshold = 'abc': expected a number",
        f"{path}: max_sources = 0: max_sources must be >= 1",
        f"{path}: k = -5: k must be >= 1",
    ]


def test_overlap_checked_against_the_effective_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path / "idx", "overlap = 100\n")
    assert load_settings(tmp_path / "idx").overlap == 100
    monkeypatch.setenv("CITERAG_TARGET", "64")
    assert problems(tmp_path / "idx").endswith("overlap = 100: overlap must be less than target (64)")


def test_bad_env_value_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITERAG_K", "-5")
    assert problems(tmp_path) == "CITERAG_K=-5: k must be >= 1"
    monkeypatch.setenv("CITERAG_K", "3")
    monkeypatch.setenv("CITERAG_THRESHOLD", "abc")
    assert problems(tmp_path) == "CITERAG_THRESHOLD=abc: expected a number"
    monkeypatch.setenv("CITERAG_THRESHOLD", "nan")
    assert problems(tmp_path) == "CITERAG_THRESHOLD=nan: expected a finite number"


def test_bad_flag_names_the_flag(tmp_path: Path) -> None:
    assert problems(tmp_path, max_sources=0) == "flag --max-sources=0: max_sources must be >= 1"
    with pytest.raises(TypeError, match="nonsense"):
        load_settings(tmp_path, nonsense=1)


def test_a_later_layer_replaces_a_bad_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path / "idx", "k = -5\n")
    monkeypatch.setenv("CITERAG_K", "8")
    assert load_settings(tmp_path / "idx").k == 8


def test_unknown_keys_in_file(tmp_path: Path) -> None:
    path = write_config(tmp_path / "idx", "k = 5\nfoo = 1\nbar = 2\nindex_dir = '/x'\n")
    assert problems(tmp_path / "idx") == f"{path}: unknown setting(s) bar, foo, index_dir"


def test_invalid_toml(tmp_path: Path) -> None:
    path = write_config(tmp_path / "idx", "threshold = \n")
    message = problems(tmp_path / "idx")
    assert message.startswith(f"{path}: invalid TOML: ") and "line 1" in message
    assert len(message.splitlines()) == 1


def test_existing_config_files_keep_working(tmp_path: Path) -> None:
    write_config(tmp_path / "idx", 'strategy = "C"\ntarget = 384\noverlap = 32\n'
                 'embedding_model = "multilingual-e5-small"\nthreshold = 0.7\nmax_sources = 3\nmode = "hybrid"\n'
                 'k = 30\nrrf_k = 60\nmax_file_mb = 20.0\n'
                 'rerank_model = "/m/reranker"\nrerank_shortlist = 40\ngenerator = "openai"\nllm_context = 2048\n'
                 'openai_base_url = "http://h/v1"\nopenai_stream = true\ngenerator_timeout = 30\n')
    s = load_settings(tmp_path / "idx")
    assert (s.strategy, s.target, s.overlap, s.mode, s.generator, s.openai_stream) == ("C", 384, 32, "hybrid",
                                                                                         "openai", True)
    assert s.generator_timeout == 30.0 and isinstance(s.generator_timeout, float)


def test_store_url_default_and_schemes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = load_settings("rel-index")
    assert s.store_url == f"sqlite://{(tmp_path / 'rel-index').resolve().as_posix()}"
    assert s.store_url.startswith("sqlite:///") and s.store_scheme == "sqlite"
    assert s.sqlite_dir == (tmp_path / "rel-index").resolve()

    pg = load_settings(tmp_path, store_url="postgresql://user@db/citerag")
    assert pg.store_scheme == "postgresql"
    with pytest.raises(SettingsError, match="not a sqlite"):
        _ = pg.sqlite_dir

    monkeypatch.setenv("CITERAG_STORE_URL", "mysql://user:hunter2@db/x")
    message = problems(tmp_path)
    assert message.startswith("CITERAG_STORE_URL=mysql://user:***@db/x: expected sqlite:///ABSOLUTE/DIR")
    assert "hunter2" not in message  # a password never reaches a message
    monkeypatch.setenv("CITERAG_STORE_URL", "sqlite://relative/dir")
    assert "absolute directory" in problems(tmp_path)
    monkeypatch.setenv("CITERAG_STORE_URL", "/just/a/path")
    assert "expected sqlite:///" in problems(tmp_path)


def test_loading_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITERAG_HOME", str(tmp_path / "home" / "deep"))
    load_settings()
    load_settings(tmp_path / "idx")
    load_settings()  # ./.citerag
    assert list(tmp_path.iterdir()) == []


def test_direct_construction_reads_no_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITERAG_K", "9")
    write_config(tmp_path / ".citerag", "k = 8\n")
    assert Settings().k == 20
    assert Settings.model_validate({"k": 3}).k == 3


def test_direct_construction_validates() -> None:
    with pytest.raises(ValueError, match="k"):
        Settings(k=0)
    with pytest.raises(ValueError, match="strategy"):
        Settings.model_validate({"strategy": 5})
    with pytest.raises(ValueError, match="extra"):
        Settings.model_validate({"no_such_setting": 1})
    with pytest.raises(ValueError, match="frozen"):
        Settings().k = 3


def test_with_changes_validates_and_ignores_none(tmp_path: Path) -> None:
    s = Settings(index_dir=tmp_path, k=7)
    changed = s.with_changes(threshold=0.5, k=None)
    assert (changed.threshold, changed.k, s.threshold) == (0.5, 7, 0.675)
    with pytest.raises(SettingsError, match="threshold = nan: expected a finite number"):
        s.with_changes(threshold=math.nan)
    with pytest.raises(SettingsError, match="overlap must be less than target"):
        s.with_changes(target=32)
    # A derived store_url follows the index dir; an explicit one stays.
    assert s.with_changes(index_dir=tmp_path / "b").sqlite_dir == (tmp_path / "b").resolve()
    pinned = s.with_changes(store_url="sqlite:///pinned")
    assert pinned.with_changes(index_dir=tmp_path / "b").store_url == "sqlite:///pinned"


def test_set_in_config_file_roundtrip(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    path = write_config(index, '# tuned by hand\nk = 7\nrerank_model = "old"\nmode = "bm25"\n')
    assert set_in_config_file(index, "rerank_model", '/models/re"ranker\\v2') == path
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# tuned by hand\n") and text.count("rerank_model") == 1
    assert tomllib.loads(text) == {"k": 7, "mode": "bm25", "rerank_model": '/models/re"ranker\\v2'}
    s = load_settings(index)
    assert (s.k, s.mode, s.rerank_model) == (7, "bm25", '/models/re"ranker\\v2')

    set_in_config_file(index, "threshold", "0.55")  # converted to the setting's type
    assert tomllib.loads(path.read_text(encoding="utf-8"))["threshold"] == 0.55
    assert not list(index.glob("*.tmp"))


def test_set_in_config_file_creates_the_file(tmp_path: Path) -> None:
    (tmp_path / "idx").mkdir()
    path = set_in_config_file(tmp_path / "idx", "openai_stream", True)
    assert path.read_text(encoding="utf-8") == "openai_stream = true\n"


def test_set_in_config_file_rejects_bad_values(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    path = write_config(index, "k = 7\n")
    with pytest.raises(SettingsError, match="k = 'abc': expected a whole number"):
        set_in_config_file(index, "k", "abc")
    with pytest.raises(SettingsError, match="unknown setting nope"):
        set_in_config_file(index, "nope", "1")
    with pytest.raises(SettingsError, match="overlap must be less than target"):
        set_in_config_file(index, "target", "32")  # the default overlap, 64, would no longer fit
    assert path.read_text(encoding="utf-8") == "k = 7\n"  # untouched


def test_token_prices_are_per_model_and_never_negative() -> None:
    assert Settings(token_prices={"smollm2": (0.5, 1.5)}).token_prices == {"smollm2": (0.5, 1.5)}
    for bad in ({"m": (-1.0, 1.0)}, {"m": (1.0,)}, {"m": "cheap"}):
        with pytest.raises(ValueError, match="token_prices"):
            Settings(token_prices=bad)  # type: ignore[arg-type]
