"""Command-line options shared by `ask` and `eval`, declared once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


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
