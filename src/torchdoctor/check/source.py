"""Bytes to source text as Python itself decodes it: BOM, PEP 263 coding cookie, else UTF-8.

Line endings are kept as they are (unlike ``tokenize.open``), so that a fix
rewrites the file with the user's own newlines.
"""

from __future__ import annotations

import codecs
import io
import tokenize

from torchdoctor.check.patterns import lazy
from torchdoctor.record import FrozenRecord

__all__ = ["SourceError", "Decoded", "decode_source", "encode_source", "split_lines"]

NEWLINE = lazy(r"\r\n|\r|\n")  # the line breaks ast counts (str.splitlines counts more)


def split_lines(text: str) -> list[str]:
    """The source's lines as ast numbers them (without their line breaks)."""
    return text.split("\n") if "\r" not in text else NEWLINE.split(text)  # the same, str.split 5x faster


class SourceError(Exception):
    """The bytes are not Python source text (binary, undecodable, unknown encoding)."""


class Decoded(FrozenRecord):
    __slots__ = ("text", "encoding")

    def __init__(self, text: str, encoding: str) -> None:
        self._fill(text, encoding)  # encoding as tokenize names it: "utf-8", "utf-8-sig", "iso-8859-1", ...


def decode_source(data: bytes) -> Decoded:
    if b"\x00" in data:
        raise SourceError("binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        message = str(exc.args[0] if exc.args else exc)
        if "unknown encoding" in message or "encoding problem" in message:
            try:  # a codec a package registers to rewrite the source (``# -*- coding: future_fstrings -*-``)
                return Decoded(data.decode("utf-8").removeprefix("\ufeff"), "utf-8")  # over UTF-8: read it as such
            except UnicodeDecodeError:
                raise SourceError(f"cannot decode: {message}") from None
        encoding = "utf-8"  # undecodable first lines: let the decoder say where
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        name = "UTF-8" if encoding.startswith("utf-8") else encoding
        raise SourceError(
            f"not valid {name} at line {line} (byte 0x{data[exc.start]:02x}); "
            f"save the file as UTF-8 or declare its encoding (# -*- coding: latin-1 -*-)"
        ) from None
    if text.startswith("\ufeff"):  # a BOM under a utf-8 cookie
        text = text[1:]
    return Decoded(text, encoding)


def encode_source(text: str, encoding: str) -> bytes:
    """Text back to bytes in the file's own encoding (a UTF-8 BOM is restored)."""
    if encoding == "utf-8-sig":
        return codecs.BOM_UTF8 + text.encode("utf-8")
    return text.encode(encoding)
