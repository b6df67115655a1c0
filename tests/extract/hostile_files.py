"""Hostile and synthetic files, generated in memory by the tests so that nothing dangerous sits on disk.

Also small well-formed DOCX / ODT / EPUB builders (headings, tables), for tests that need known
structure the real samples lack.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

BILLION_LAUGHS = (b'<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
                  + b"".join(b' <!ENTITY lol%d "%s">\n' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
                             for i in range(1, 10))
                  + b']>\n<root>&lol9;</root>\n')


def zip_of(parts: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, data in parts.items():
            z.writestr(name, data)
    return buf.getvalue()


def zip_with_big_member(parts: dict[str, bytes], name: str, size: int) -> bytes:
    """A zip where `name` inflates to `size` bytes of spaces (streamed, so building it is cheap)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for n, data in parts.items():
            z.writestr(n, data)
        block = b" " * (1 << 20)
        with z.open(name, "w", force_zip64=True) as f:
            left = size
            while left > 0:
                f.write(block[:min(left, len(block))])
                left -= len(block)
    return buf.getvalue()


# ---------------------------------------------------------------- DOCX / ODT / EPUB builders

_W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def docx(body_xml: str) -> bytes:
    styles = (f'<w:styles {_W}><w:style w:type="paragraph" w:styleId="Heading1"><w:name w:val="heading 1"/>'
              '</w:style><w:style w:type="paragraph" w:styleId="Title"><w:name w:val="Title"/></w:style></w:styles>')
    return zip_of({
        "[Content_Types].xml": b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/'
                               b'2006/content-types"/>',
        "word/document.xml": f'<?xml version="1.0"?><w:document {_W}><w:body>{body_xml}</w:body></w:document>'
        .encode(),
        "word/styles.xml": styles.encode(),
    })


def docx_para(text: str, style: str | None = None) -> str:
    ppr = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f"<w:p>{ppr}<w:r><w:t>{text}</w:t></w:r></w:p>"


def docx_table(rows: list[list[str]]) -> str:
    return "<w:tbl>" + "".join("<w:tr>" + "".join(f"<w:tc>{docx_para(c)}</w:tc>" for c in r) + "</w:tr>"
                               for r in rows) + "</w:tbl>"


def sample_docx() -> bytes:
    return docx(docx_para("Field notes", "Title")
                + docx_para("Introduction", "Heading1")
                + docx_para("Cormorants dry their wings on the breakwater every morning.")
                + docx_para("Counts", "Heading1")
                + docx_table([["Species", "Count"], ["Cormorant", "14"], ["Grey heron", "3"]])
                + docx_para("The herons left before noon."))


_ODF_NS = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
           'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
           'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"')


def odt(body_xml: str) -> bytes:
    content = (f'<?xml version="1.0"?><office:document-content {_ODF_NS}><office:body><office:text>{body_xml}'
               '</office:text></office:body></office:document-content>')
    return zip_of({"mimetype": b"application/vnd.oasis.opendocument.text", "content.xml": content.encode()})


def sample_odt() -> bytes:
    return odt('<text:h text:outline-level="1">Tide tables</text:h>'
               "<text:p>High water at the harbour mouth comes forty minutes after the pier.</text:p>"
               "<table:table><table:table-row><table:table-cell><text:p>Day</text:p></table:table-cell>"
               "<table:table-cell><text:p>High water</text:p></table:table-cell></table:table-row>"
               "<table:table-row><table:table-cell><text:p>Monday</text:p></table:table-cell>"
               "<table:table-cell><text:p>06:12</text:p></table:table-cell></table:table-row></table:table>")


def epub(chapters: list[tuple[str, str]]) -> bytes:
    """chapters: (file name, XHTML body)."""
    items = "".join(f'<item id="c{i}" href="{n}" media-type="application/xhtml+xml"/>' for i, (n, _) in
                    enumerate(chapters))
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
    opf = ('<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
           '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Harbour guide</dc:title></metadata>'
           f"<manifest>{items}</manifest><spine>{spine}</spine></package>")
    parts = {"mimetype": b"application/epub+zip",
             "META-INF/container.xml": b'<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:'
                                       b'tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/'
                                       b'content.opf" media-type="application/oebps-package+xml"/></rootfiles>'
                                       b"</container>",
             "OEBPS/content.opf": opf.encode()}
    for name, body in chapters:
        parts[f"OEBPS/{name}"] = (f'<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><head><title>'
                                  f"{name}</title></head><body>{body}</body></html>").encode()
    return zip_of(parts)


def sample_epub() -> bytes:
    return epub([("one.xhtml", "<h1>Arrival</h1><p>The ferry docks at the north quay at half past nine.</p>"),
                 ("two.xhtml", "<h1>Departure</h1><p>Boats leave from the south slipway after the bell.</p>")])


# ---------------------------------------------------------------- hostile

def pdf_bytes(objects: list[bytes], trailer_extra: bytes = b"") -> bytes:
    """A PDF with correct xref offsets from numbered object bodies (object 1 is the catalog)."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, trailer_extra, xref)
    return bytes(out)


def encrypted_pdf() -> bytes:
    """Standard security handler with a user password: nothing opens it without that password."""
    return pdf_bytes(
        [b"<< /Type /Catalog /Pages 2 0 R >>",
         b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
         b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
         b"<< /Filter /Standard /V 1 /R 2 /O <" + b"11" * 32 + b"> /U <" + b"22" * 32 + b"> /P -44 >>"],
        trailer_extra=b"/Encrypt 4 0 R /ID [<0123456789abcdef0123456789abcdef> <0123456789abcdef0123456789abcdef>] ")


def hostile_files(samples: Path) -> dict[str, tuple[bytes, str]]:
    """File name -> (bytes, a fragment the failure reason must contain)."""
    docx_sample = (samples / "docx-python-docx-paras-tables.docx").read_bytes()
    pdf_sample = (samples / "pdf-table-mtcars-3p.pdf").read_bytes()
    return {
        "encrypted.pdf": (encrypted_pdf(), "encrypted PDF"),
        "truncated.pdf": (pdf_sample[: len(pdf_sample) // 2], "not a readable PDF"),
        "corrupt.pdf": (b"%PDF-1.4\n" + bytes(range(256)) * 64, "not a readable PDF"),
        "empty.pdf": (b"", "empty file"),
        "truncated.docx": (docx_sample[: len(docx_sample) // 2], "not a valid DOCX file"),
        "not-a-zip.xlsx": (b"PK\x03\x04 this is no zip archive at all" * 10, "not a valid XLSX file"),
        "empty.odt": (b"", "empty file"),
        "zipbomb.docx": (zip_with_big_member({}, "word/document.xml", 80 << 20), "zip bomb"),
        "ratiobomb.xlsx": (zip_with_big_member({}, "xl/workbook.xml", 4 << 20), "zip bomb"),
        "entities.docx": (zip_of({"word/document.xml": BILLION_LAUGHS}), "entity bomb"),
        "entities.xlsx": (zip_of({"xl/workbook.xml": BILLION_LAUGHS}), "entity bomb"),
        "entities.odt": (zip_of({"content.xml": BILLION_LAUGHS}), "entity bomb"),
        "entities.epub": (zip_of({"META-INF/container.xml": BILLION_LAUGHS}), "entity bomb"),
        "binary.txt": (bytes(range(256)) * 16, "binary data"),
        "binary.csv": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200), "binary data"),
        "binary.vtt": (b"WEBVTT\n\n\x00\x01\x02" * 50, "binary data"),
        "empty.md": (b"", "empty file"),
        "deep.html": (b"<html><body>" + b"<div>" * 5000 + b"deep" + b"</div>" * 5000 + b"</body></html>",
                      "nested too deeply"),
        "no-cues.srt": (b"just some words, no timings\n", "no cues"),
    }
