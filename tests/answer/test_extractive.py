"""The extractive generator's sentence rule on real extracted text (a PDF paragraph, an HTML table)."""

from __future__ import annotations

from citerag.answer.generators.extractive import sentences

PDF_PARAGRAPH = (
    "In some occasion, you may wish to set MTU manually after experiments with ping(8) with \"-M do\" option to send a"
    " ICMP\npacket with various data packet size. MTU is the maximum succeeding data packet size without IP "
    "fragmentation plus 28 bytes\nfor the IPv4 and plus 48 bytes for the IPv6.\n\nSee systemd."
)
HTML_TABLE = (
    'Operation | Command snippets\nList all target unit configuration | "systemctl list-units --type=target"\n'
    'List all socket units in memory | "systemctl list-sockets"'
)


def test_line_wraps_are_undone_and_fragments_dropped() -> None:
    got = sentences(PDF_PARAGRAPH)
    assert got[1] == ("MTU is the maximum succeeding data packet size without IP fragmentation plus 28 bytes for the "
                      "IPv4 and plus 48 bytes for the IPv6.")
    assert "See systemd." not in got and len(got) == 2


def test_table_rows_stay_separate() -> None:
    assert sentences(HTML_TABLE) == HTML_TABLE.split("\n")
