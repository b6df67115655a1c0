"""`citerag mcp`: the home's collections served to an MCP client (an agent, an IDE) over stdio."""

from __future__ import annotations

import click

from citerag.app.home import Citerag
from citerag.cli.options import index_option
from citerag.errors import CiteragError
from citerag.settings import load_settings


@click.command("mcp")
@index_option
def mcp_command(index: str | None) -> None:
    """Serve the tools search, ask, list_collections and read_document over stdio (the Model Context Protocol),
    for every collection of the home. Over HTTP, `citerag serve` answers the same tools at /mcp."""
    from citerag.service.mcp import local

    settings = load_settings(index)
    if not settings.index_dir.is_dir():
        raise CiteragError(f"no index at {settings.index_dir}: run `citerag ingest PATH` first")
    core = Citerag.open_home(settings)
    try:
        local(core).run("stdio")  # stdout is the protocol's: everything else goes to stderr
    finally:
        core.close()
