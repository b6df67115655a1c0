"""`citerag slo-rules SLO.yaml`: the Prometheus rules for the error budget of a service-level objectives file
(deploy/slo.yaml), printed as YAML; the compiler is citerag.service.slo, next to the metrics it reads."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("slo-rules")
@click.argument("slo_file", metavar="SLO.yaml", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def slo_rules_command(slo_file: Path) -> None:
    """Print Prometheus recording and burn-rate alerting rules for the objectives in SLO.yaml."""
    from citerag.service.slo import render  # here: the compiler and yaml are no part of any other command's start

    click.echo(render(slo_file), nl=False)
