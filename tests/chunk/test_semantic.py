"""Strategy G (semantic cuts): where the cuts go, the size bound, the overlap, the stamp; the deterministic fake
encoder for the rules, the real all-MiniLM-L6-v2 once on a real chapter."""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np
import pytest

from citerag.app.home import Citerag
from citerag.chunk import chunk_extracted, strategy_params
from citerag.chunk.semantic import MIN_PIECE_DIVISOR, sentence_units
from citerag.errors import CiteragError
from citerag.extract import extractor_for
from citerag.extract.markdown import MarkdownExtractor
from citerag.settings import Settings
from citerag.types import Chunk, Extracted
from corpus_paths import DEV_CORPUS, HTML_FILES, MARKDOWN_FILES
from fakes import HashEncoder

# Two topics in one paragraph: the boundary rule keeps it whole (776 characters), G should cut between them.
APT = ["The apt tool installs a package from the Debian archive.",
       "The apt tool upgrades every package from the Debian archive.",
       "The apt tool removes a package and keeps the Debian archive list.",
       "The apt tool searches the package lists of the Debian archive.",
       "The apt tool downloads each package from a Debian archive mirror.",
       "The apt tool verifies every package against the Debian archive keys."]
GRUB = ["Grub loads the Linux kernel and the initrd image at boot time.",
        "Grub shows a menu of kernel entries before the initrd image loads at boot.",
        "Grub passes kernel options to the initrd image during boot.",
        "Grub reads its kernel menu from a config file at boot time.",
        "Grub can boot an older kernel and initrd image after a failed upgrade.",
        "Grub writes the kernel and initrd image names into its boot menu."]
EMBED = HashEncoder().encode


def two_topics() -> Extracted:
    text = "## Tools\n\n" + " ".join(APT + GRUB) + "\n"
    return MarkdownExtractor().extract(text.encode(), Path("tools.md"), title="Tools")


@pytest.fixture(scope="module")
def corpus() -> list[Extracted]:
    out = []
    for path in MARKDOWN_FILES + HTML_FILES:
        extractor = extractor_for(path)
        assert extractor is not None
        out.append(extractor.extract(path.read_bytes(), path))
    return out


def test_the_cut_falls_where_the_fake_similarity_drops() -> None:
    v = EMBED(APT + GRUB)
    distances = 1 - np.sum(v[:-1] * v[1:], axis=1)
    assert int(np.argmax(distances)) == len(APT) - 1  # the fake itself sees the drop at the topic change
    ext = two_topics()
    assert len(chunk_extracted(ext, "E", 1000)) == 1
    chunks = chunk_extracted(ext, "G", 1000, 64, embed=EMBED)
    assert [c.content for c in chunks] == [" ".join(APT), " ".join(GRUB)]
    # At the 100th percentile no distance exceeds the breakpoint; both halves fit, so nothing cuts.
    assert [c.content for c in chunks_g(ext, 1000, percentile=100)] == [" ".join(APT + GRUB)]


def chunks_g(ext: Extracted, target: int, percentile: float = 95) -> list[Chunk]:
    return chunk_extracted(ext, "G", target, 64, embed=EMBED, percentile=percentile)


def test_an_over_long_group_splits_at_its_largest_inner_distance() -> None:
    # No percentile cut, but the paragraph is over the target: the one split goes at the topic change.
    assert [c.content for c in chunks_g(two_topics(), 500, percentile=100)] == [" ".join(APT), " ".join(GRUB)]


def section_of(ext: Extracted, c: Chunk) -> int:
    return bisect.bisect_right([s.start for s in ext.sections], c.start) - 1


@pytest.mark.parametrize("target", [256, 512])
def test_size_bound_and_small_pieces_merge(target: int, corpus: list[Extracted]) -> None:
    over = small = 0
    for ext in corpus:
        chunks = chunks_g(ext, target)
        for c in chunks:
            if len(c.content) > target:  # only one sentence alone may exceed the target
                s = ext.sections[section_of(ext, c)]
                assert (c.start, c.end) in sentence_units(ext.text, s.body_start, s.end), (ext.title, c.start)
                over += 1
        # A piece under target / 4 stays apart only where joining either neighbour would pass the target.
        for prev, cur, nxt in zip([None, *chunks[:-1]], chunks, [*chunks[1:], None], strict=True):
            if len(cur.content) >= target // MIN_PIECE_DIVISOR:
                continue
            small += 1
            for other in (prev, nxt):
                if other is not None and section_of(ext, other) == section_of(ext, cur):
                    assert max(other.end, cur.end) - min(other.start, cur.start) > target, (ext.title, cur.start)
    assert over > 0 and small > 0  # both rules are exercised by the real text


def test_overlap_is_in_text_only(corpus: list[Extracted]) -> None:
    led = 0
    for ext in corpus[:10]:
        firsts = {s.body_start for s in ext.sections}
        for c in chunks_g(ext, 512):
            s = ext.sections[section_of(ext, c)]
            assert ext.text[c.start:c.end] == c.content
            assert c.text.startswith(c.header) and c.header.startswith(f"[{ext.title}")
            lead = c.text[len(c.header):len(c.text) - len(c.content)]
            if lead:
                lead = lead.removesuffix(" ")
                assert 0 < len(lead) <= 64 and ext.text[s.body_start:c.start].rstrip().endswith(lead)
                led += 1
            if c.start in firsts:  # never across a section body's start
                assert not lead
    assert led > 100


def test_strategy_g_needs_an_encoder() -> None:
    with pytest.raises(CiteragError, match="strategy G cuts on sentence embeddings"):
        chunk_extracted(two_topics(), "G")


def test_percentile_is_stamped_and_a_change_makes_documents_stale(tmp_path: Path) -> None:
    def app(percentile: float) -> Citerag:
        a = Citerag()
        a.register_encoder(HashEncoder())
        a.open_collection(Settings(index_dir=tmp_path / "ix", embedding_model="hash-64", strategy="G",
                                   semantic_percentile=percentile), create=True)
        return a

    with app(95) as first:
        assert len(first.ingest([DEV_CORPUS / "apa.en.html"]).indexed) == 1
        (doc,) = first.collection().documents()
        assert doc.stamps["strategy_params"] == {"target": 512, "overlap": 64, "percentile": 95}
        assert first.status().counts["stale"] == 0
    with app(90) as second:
        assert second.status().counts["stale"] == 1
        assert len(second.reindex_stale().indexed) == 1
        assert second.status().counts["stale"] == 0
    assert strategy_params("E", 512, 64, 90) == {"target": 512, "overlap": 0}  # A-F stamps are unchanged


def test_real_encoder_on_a_real_chapter(encoder) -> None:  # type: ignore[no-untyped-def]
    path = DEV_CORPUS / "ch04.en.html"
    ext = extractor_for(path).extract(path.read_bytes(), path)  # type: ignore[union-attr]
    chunks = chunk_extracted(ext, "G", 512, 64, embed=encoder.encode)
    covered = bytearray(len(ext.text))
    for c in chunks:
        assert ext.text[c.start:c.end] == c.content and c.content == c.content.strip()
        assert c.text.startswith(c.header) and c.text.endswith(c.content)
        covered[c.start:c.end] = b"\x01" * (c.end - c.start)
    for s in ext.sections:
        covered[s.start:s.body_start] = b"\x01" * (s.body_start - s.start)
    assert not [i for i, ch in enumerate(ext.text) if not ch.isspace() and not covered[i]]
    # Semantic cuts are not the boundary rule's: some chunk ends inside one of E's paragraphs.
    assert {(c.start, c.end) for c in chunks} != {(c.start, c.end) for c in chunk_extracted(ext, "E", 512)}
