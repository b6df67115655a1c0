"""`python -m citerag.cli ...`: the same as the `citerag` command."""

from citerag.cli import main

main()
