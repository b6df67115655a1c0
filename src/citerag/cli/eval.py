"""`citerag eval`: the command lives with the evaluation (citerag.eval.command); this module only hands it over.

citerag.eval.command imports the shared options (citerag.cli.options), so the group loads this module only when
the command is asked for (see citerag.cli): importing citerag.eval.command first must not go round in a circle."""

from __future__ import annotations

from citerag.eval.command import eval_command

__all__ = ["eval_command"]
