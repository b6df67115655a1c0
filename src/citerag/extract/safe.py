"""Reading untrusted containers: zip archives (DOCX, XLSX, ODT, ODS, EPUB) and the XML inside them.

Nothing is inflated before its declared size and compression ratio are checked, and nothing is
inflated past its budget even when the declared size lies. XML is parsed with entity resolution,
DTD loading and network access off, and any document that declares entities is refused outright,
since office formats never need them and "billion laughs" needs nothing else.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator

import lxml.etree

from citerag.errors import ExtractionError

MAX_MEMBERS = 20_000
MAX_MEMBER_BYTES = 64 * 1024 * 1024  # one inflated XML part
MAX_TOTAL_BYTES = 256 * 1024 * 1024  # all parts read from one archive
MAX_RATIO = 200  # inflated / compressed, for parts over 1 MiB
_ENTITY_DECL = re.compile(rb"<!ENTITY", re.I)


class SafeZip:
    def __init__(self, data: bytes, kind: str) -> None:
        self.kind = kind
        if not data:
            raise ExtractionError("empty file: no text to index")
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(data))
            infos = self._zip.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
            raise ExtractionError(f"not a valid {kind} file (corrupt or truncated zip: {exc})") from None
        if len(infos) > MAX_MEMBERS:
            raise ExtractionError(f"{kind} archive has {len(infos)} parts, over the limit of {MAX_MEMBERS}")
        self._infos = {i.filename: i for i in infos}
        self._read_total = 0
        declared = sum(i.file_size for i in infos)
        if declared > 4 * MAX_TOTAL_BYTES:
            raise ExtractionError(f"{kind} archive would inflate to {declared / 1048576:.0f} MB "
                                  "(zip bomb?): refused")

    def names(self) -> list[str]:
        return list(self._infos)

    def has(self, name: str) -> bool:
        return name in self._infos

    def read(self, name: str) -> bytes:
        info = self._infos.get(name)
        if info is None:
            raise ExtractionError(f"not a valid {self.kind} file: part {name} is missing")
        if info.flag_bits & 0x1:
            raise ExtractionError(f"{self.kind} file is encrypted (part {name}): cannot read it")
        if info.file_size > MAX_MEMBER_BYTES:
            raise ExtractionError(f"{self.kind} part {name} would inflate to {info.file_size / 1048576:.0f} MB, "
                                  f"over the {MAX_MEMBER_BYTES // 1048576} MB limit (zip bomb?): refused")
        if info.file_size > 1 << 20 and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise ExtractionError(f"{self.kind} part {name} has a compression ratio of "
                                  f"{info.file_size // max(info.compress_size, 1)}:1 (zip bomb?): refused")
        if self._read_total + info.file_size > MAX_TOTAL_BYTES:
            raise ExtractionError(f"{self.kind} file inflates to over {MAX_TOTAL_BYTES // 1048576} MB: refused")
        budget = info.file_size
        out = bytearray()
        try:
            with self._zip.open(info) as f:
                while True:
                    block = f.read(1 << 20)
                    if not block:
                        break
                    out += block
                    if len(out) > budget:  # the declared size lied
                        raise ExtractionError(f"{self.kind} part {name} inflates past its declared size: refused")
        except ExtractionError:
            raise
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError, NotImplementedError) as exc:
            raise ExtractionError(f"not a valid {self.kind} file (part {name} is corrupt: {exc})") from None
        except Exception as exc:  # zlib.error and friends
            raise ExtractionError(f"not a valid {self.kind} file (part {name} is corrupt: {exc})") from None
        self._read_total += len(out)
        return bytes(out)

    def xml(self, name: str) -> lxml.etree._Element:
        return parse_xml(self.read(name), f"{self.kind} part {name}")


def parse_xml(data: bytes, what: str) -> lxml.etree._Element:
    """Parse untrusted XML: no entities, no DTD, no network, no huge trees."""
    if _ENTITY_DECL.search(data):
        raise ExtractionError(f"{what} declares XML entities (possible entity bomb): refused")
    parser = lxml.etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True, huge_tree=False,
                                  remove_comments=True, remove_pis=True)
    try:
        return lxml.etree.fromstring(data, parser)
    except lxml.etree.XMLSyntaxError as exc:
        raise ExtractionError(f"{what} is not well-formed XML: {exc}") from None


def iterparse(data: bytes, what: str) -> Iterator[lxml.etree._Element]:
    """Stream the elements of an untrusted XML part as they end (no entities, no DTD, no network)."""
    if re.search(rb"<!ENTITY", data, re.I):
        raise ExtractionError(f"{what} declares XML entities (possible entity bomb): refused")
    context = lxml.etree.iterparse(io.BytesIO(data), events=("end",), resolve_entities=False, load_dtd=False,
                                   no_network=True, huge_tree=False)
    try:
        for _, el in context:
            yield el
    except lxml.etree.XMLSyntaxError as exc:
        raise ExtractionError(f"{what} is not well-formed XML: {exc}") from None


def local(tag: object) -> str:
    """The local name of an element tag, without its namespace."""
    return str(tag).rsplit("}", 1)[-1] if isinstance(tag, str) else ""
