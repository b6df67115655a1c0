"""Command-line options shared by several commands (and by `eval`, citerag.eval.command), each declared once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from citerag.settings import MODES

F = TypeVar("F", bound=Callable[..., Any])

STRATEGIES = list("ABCDEFG")

# Every command that reads or writes an index: the local ones, serve, keys, worker, trace and replay.
index_option = click.option("--index", "index", metavar="DIR", default=None,
                            help="Index directory, the home of its config and collections "
                                 "(default ./.citerag, or $CITERAG_HOME).")

# ask and search.
mode_option = click.option("--mode", type=click.Choice(list(MODES)), default=None)
shortlist_option = click.option("--shortlist", type=click.IntRange(1, 1000), default=None,
                                help="Hits the reranker scores (25).")


def json_option(help_text: str | None = None) -> Callable[[F], F]:
    """--json: print the command's result as JSON rather than lines."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def strategy_option(default: str | None, help_text: str | None = None) -> Callable[[F], F]:
    """--strategy A..G (None: the configured one)."""
    return click.option("--strategy", type=click.Choice(STRATEGIES), default=default,
                        show_default=default is not None, help=help_text)


def rerank_option(help_text: str) -> Callable[[F], F]:
    """--rerank MODEL_DIR: a cross-encoder folder (see train-reranker); '' turns reranking off."""
    return click.option("--rerank", "rerank_model", metavar="MODEL_DIR", default=None, help=help_text)


def generator_options(default: str | None) -> Callable[[F], F]:
    """--generator, --llm-model, --openai-base-url, --openai-model, --timeout (None: take the config's)."""

    def decorate(f: F) -> F:
        for option in reversed([
            click.option("--generator", type=click.Choice(["extractive", "llama", "openai"]), default=default,
                         show_default=default is not None,
                         help="extractive (no model), llama (local GGUF) or openai (compatible HTTP server)."),
            click.option("--llm-model", "llm_model_path", metavar="GGUF", default=None,
                         help="GGUF file for --generator llama (default: the packaged SmolLM2-135M-Instruct)."),
            click.option("--openai-base-url", default=None, metavar="URL", help="e.g. http://127.0.0.1:8080/v1"),
            click.option("--openai-model", default=None, metavar="NAME"),
            click.option("--timeout", "generator_timeout", type=click.FloatRange(0.1, 3600), default=None,
                         help="Seconds the openai generator waits to connect and per read (60)."),
        ]):
            f = option(f)
        return f

    return decorate


def _filters(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> Any:
    """--filter KEY=VALUE, repeatable: values of one key are alternatives (any matches), keys all apply. A wrong
    one is a FilterError, which the CLI prints as one line (a click usage error would print the usage too)."""
    from citerag.app.models import FilterError, Filters  # here: the CLI's start-up stays light

    data: dict[str, Any] = {}
    for value in values:
        key, sep, wanted = value.partition("=")
        if not sep:
            raise FilterError("--filter", f"{value!r} is not KEY=VALUE (e.g. type=pdf)")
        if key in ("since", "until"):
            data[key] = wanted
        else:
            data.setdefault(key, []).append(wanted)
    return Filters.parse(data, "--filter")


filter_option = click.option(
    "--filter", "filters", multiple=True, metavar="KEY=VALUE", callback=_filters,
    help="Search only documents that match, applied inside the indexes: source=NAME (or upload, local), "
         "type=pdf|html|markdown|..., path=GLOB, language=en, since=DATE, until=DATE; repeat a key for any of "
         "several values.")
