"""Small PDFs written by hand (PDF is text): a real document of a few pages, and hostile ones.

Each object is numbered from 1 in the order given; the cross-reference table is computed from the
bytes, so the files are well formed unless a test breaks them on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence


def assemble(objects: Sequence[bytes], root: int = 1) -> bytes:
    """A PDF file of ``objects`` (object ``i + 1`` is ``objects[i]``, without ``obj``/``endobj``)."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        root,
        xref,
    )
    return bytes(out)


def _stream(content: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d %s>>\nstream\n" % (len(content), extra) + content + b"\nendstream"


def document(pages: int = 3, title: str = "Quarterly report") -> bytes:
    """A portrait A4 document of ``pages`` pages: a dark title bar, a heading and lines of text."""
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(pages)).encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i in range(pages):
        text = b"".join(
            b"BT /F1 11 Tf 60 %d Td (Line %d of page %d: the figures are in the table below.) Tj ET\n"
            % (680 - 18 * n, n + 1, i + 1)
            for n in range(20)
        )
        content = (
            b"0.15 0.3 0.6 rg 0 772 595 70 re f\n"
            b"BT 1 1 1 rg /F1 28 Tf 60 795 Td (" + title.encode() + b") Tj ET\n"
            b"0 0 0 rg BT /F1 16 Tf 60 720 Td (Page %d of %d) Tj ET\n"
            % (i + 1, pages)
            + text
            + b"0.9 0.5 0.1 rg 60 120 475 120 re f\n"
        )
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842]"
            b" /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objects.append(_stream(content))
    return assemble(objects)


def nested_forms(depth: int = 12, fan_out: int = 10) -> bytes:
    """A one-page PDF whose page draws a form ``fan_out`` times, which draws the next form
    ``fan_out`` times, ``depth`` deep: ``fan_out ** depth`` rectangles from a few hundred bytes
    (a "billion laughs" for a PDF renderer; it never finishes in reasonable time)."""
    first_form = 4
    draws = b"".join(b"q 0.9 0 0 0.9 1 1 cm /X Do Q\n" for _ in range(fan_out))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 600 600]"
        b" /Resources << /XObject << /X %d 0 R >> >> /Contents %d 0 R >>"
        % (first_form, first_form + depth),
    ]
    for level in range(depth):
        last = level == depth - 1
        body = b"0 0 1 rg 0 0 10 10 re f\n" if last else draws
        resources = (
            b""
            if last
            else b"/Resources << /XObject << /X %d 0 R >> >> " % (first_form + level + 1)
        )
        objects.append(
            _stream(body, b"/Type /XObject /Subtype /Form /BBox [0 0 600 600] " + resources)
        )
    objects.append(_stream(draws))
    return assemble(objects)


def giant_page(side: int = 14400) -> bytes:
    """One page ``side`` points square (the largest PDF allows: 200 inches), filled: drawn at
    the resolution of an ordinary page it would be billions of pixels."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents 4 0 R >>" % (side, side),
        _stream(b"0.2 0.6 0.2 rg 0 0 %d %d re f\n" % (side, side)),
    ]
    return assemble(objects)


def malformed() -> bytes:
    """Starts like a PDF, then is nothing a reader can make a page of."""
    return b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog /Pages 9 0 R\nthis is not a pdf at all\n" * 20
