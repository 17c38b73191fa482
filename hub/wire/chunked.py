"""HTTP/1.1 ``Transfer-Encoding: chunked`` (RFC 9112, section 7.1), the receiving side, sans
I/O: feed the bytes read, get the body's bytes.

How AG-UI agents served over HTTP stream their ``text/event-stream`` answer: a framework writes
each event as its own chunk. Decoding them one event at a time through a general HTTP parser
costs more than the hub spends on the event itself, so this decoder hands back the body of a
whole read at once. The whole chunks of a read are cut out in one split at every CRLF (in C):
per chunk then, a check that the size line is hex digits, its value, and the length of the data
it names. A chunk the split cannot cut (its data holds a CRLF, its size line an extension, the
read ends inside it) goes the long way: a search for its size line, its data passed on as it
comes.

Strict as h11 is: a size line is hex digits, maybe an extension (``;...``, ignored), CRLF;
the chunk's data is followed by CRLF; the last chunk (size 0) by trailer fields (ignored) and
an empty line. Anything else raises :class:`BadChunk`. Bounded: a size or trailer line longer
than ``max_line`` bytes raises too; a chunk's data is passed on as it comes, never held.
"""

from __future__ import annotations

import re

_SIZE_LINE_RE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r\n")
_HEX_DIGITS = b"0123456789ABCDEFabcdef"
#: Hex digits a size line may have (the pattern's bound).
_MAX_DIGITS = 16
_SIZE_LINE, _DATA_END, _TRAILER, _DONE = range(4)


class BadChunk(ValueError):
    """The body is not valid chunked encoding."""


class ChunkedDecoder:
    def __init__(self, max_line: int = 4096) -> None:
        self.max_line = max_line
        self._buffer = bytearray()
        self._state = _SIZE_LINE
        self._left = 0  # bytes of the current chunk's data still to come

    @property
    def done(self) -> bool:
        """The last chunk and the trailer have come: the body is complete."""
        return self._state == _DONE

    def feed(self, data: bytes) -> bytes:
        """The body's bytes in ``data`` (maybe none); bytes after the body's end are dropped."""
        if self._state == _DONE or not data:
            return b""
        if self._left and not self._buffer and len(data) <= self._left:
            self._left -= len(data)  # inside one chunk's data: all of it is body
            if not self._left:
                self._state = _DATA_END
            return data
        buffer = self._buffer
        buffer += data
        out: list[bytes | bytearray] = []
        pos, end = 0, len(buffer)
        state, left = self._state, self._left
        split = False  # whole chunks cut by one split, once per read
        while pos < end:
            if left:
                take = min(left, end - pos)
                out.append(buffer[pos : pos + take])
                pos += take
                left -= take
                if not left:
                    state = _DATA_END
            elif state == _DATA_END:
                if end - pos < 2:
                    if buffer[pos : pos + 1] != b"\r":
                        raise BadChunk("a chunk's data is not followed by CRLF")
                    break
                if buffer[pos : pos + 2] != b"\r\n":
                    raise BadChunk("a chunk's data is not followed by CRLF")
                pos += 2
                state = _SIZE_LINE
            else:  # a size line, or a trailer line after the last chunk
                if state == _SIZE_LINE and not split:
                    split = True
                    pos = self._whole_chunks(buffer, pos, out)
                    continue
                if state == _SIZE_LINE:
                    line = _SIZE_LINE_RE.match(buffer, pos)
                    if line is not None and line.end() - pos <= self.max_line + 2:  # one match
                        size = int(line.group(1), 16)
                        pos = line.end()
                        if not size:
                            state = _TRAILER
                        elif (
                            pos + size + 2 <= end and buffer[pos + size : pos + size + 2] == b"\r\n"
                        ):
                            out.append(buffer[pos : pos + size])  # the whole chunk: one step
                            pos += size + 2
                        else:
                            left = size
                        continue
                eol = buffer.find(b"\r\n", pos, pos + self.max_line + 2)
                if eol < 0:
                    if end - pos > self.max_line:
                        raise BadChunk("a chunk's size line is too long")
                    break
                if state == _TRAILER:  # a trailer field (ignored), or the empty line
                    empty = eol == pos
                    pos = eol + 2
                    if empty:
                        state = _DONE
                        break
                    continue
                raise BadChunk("a chunk's size line is not a hex number")
        del buffer[:pos]
        self._state, self._left = state, left
        return b"".join(out)

    def _whole_chunks(self, buffer: bytearray, pos: int, out: list[bytes | bytearray]) -> int:
        """The chunks from ``pos`` (a size line's start) up to the first that is not whole and
        plain (a size line of hex digits only, data without CRLF, both followed by CRLF), or
        the last chunk: their data onto ``out``; the position after them."""
        parts = buffer[pos:].split(b"\r\n")
        whole = len(parts) - 1  # the parts followed by CRLF
        digits = min(_MAX_DIGITS, self.max_line)
        i = 0
        while i + 1 < whole:
            line = parts[i]
            if not 0 < len(line) <= digits or line.strip(_HEX_DIGITS):
                break  # an extension, spaces, not hex: the long way decides
            size = int(line, 16)
            data = parts[i + 1]
            if not size or len(data) != size:
                break  # the last chunk, or data holding a CRLF
            out.append(data)
            pos += len(line) + size + 4
            i += 2
        return pos
