"""The `citerag` command line. Errors reach the user as one line and a non-zero exit, never a traceback.

One module per audience: citerag.cli.local (one index on this machine), .serve (the HTTP service and its keys),
.worker (the ingestion queue), .trace (kept traces), .label (production questions labelled), .eval (the evaluation),
.ops (operations files); the options they share are declared once in citerag.cli.options."""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from citerag.cli import audit, experiment, label, local, mcp, ops, serve, sources, trace, users, worker
from citerag.errors import CiteragError

# Commands loaded only when asked for: the evaluation's modules (reports, statistics) are not worth loading for
# every other command's start.
_LAZY = {"eval": "citerag.cli.eval:eval_command"}


class _Group(click.Group):
    """A group whose `_LAZY` commands are imported the first time they are listed or run."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY and cmd_name not in self.commands:
            module, _, attribute = _LAZY[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


class _OneLine(logging.Handler):
    """Library warnings (e.g. documents of another embedding model left out) as one line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"{record.levelname.lower()}: {record.getMessage()}", err=True)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="citerag")
def cli() -> None:
    """Answers over your own documents, every claim cited to an exact character range."""


for _command in [*local.COMMANDS, serve.serve_command, serve.keys_group, worker.worker_command, trace.trace_group,
                 trace.replay_command, ops.slo_rules_command, mcp.mcp_command, label.label_group,
                 experiment.experiment_group, sources.sources_group, audit.audit_command, users.users_group,
                 users.restrict]:
    cli.add_command(_command)


def main() -> None:
    logger = logging.getLogger("citerag")
    if not logger.handlers:
        logger.addHandler(_OneLine(logging.WARNING))
        logger.propagate = False
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except CiteragError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # the last resort: still one line, unless asked for the traceback
        if os.environ.get("CITERAG_DEBUG"):
            raise
        click.echo(f"error: internal error ({type(exc).__name__}: {exc}); set CITERAG_DEBUG=1 for details",
                   err=True)
        sys.exit(1)
