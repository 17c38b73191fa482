"""Server-sent events, the client side, sans I/O: feed bytes, get each event's ``data``.

What AG-UI agents answer a ``RunAgentInput`` with (``text/event-stream``, one event per
``data:`` line). The parser follows the WHATWG rules for what it keeps: lines end with LF, CR
or CRLF (a CR at the end of one chunk and an LF at the start of the next are one line end);
the ``data`` lines of one event are joined with LF; an event is dispatched at a blank line,
and one without ``data`` dispatches nothing; comments (``:``), ``event:``, ``id:``, ``retry:``
and unknown fields are ignored; a last event not followed by a blank line when the stream ends
is dropped. A leading UTF-8 BOM is skipped. Bytes that are not UTF-8 are replaced, as the
spec says; the AG-UI decoder refuses what that breaks.

AG-UI encoders write LF only, and each event as one ``data: `` line and a blank line: a read
of such events, at an event's start, is cut apart in C (a count of the line ends proves the
shape, one ``replace`` takes the field names out, one ``decode`` and one ``split`` give the
events). Anything else among them (another field, a comment, a blank line more, a CR) sends
the read line by line, by the same rules.

Bounded: one event (its pending line and data) may hold at most ``max_event`` bytes, past
which :class:`~hub.errors.LimitExceeded` (``frame_too_large``) is raised.
"""

from __future__ import annotations

from ..errors import LimitExceeded

_BOM = b"\xef\xbb\xbf"


class SSEParser:
    def __init__(self, max_event: int = 1 << 20) -> None:
        self.max_event = max_event
        self._buffer = bytearray()
        self._data: list[str] = []
        self._size = 0
        #: The last chunk ended with CR: an LF first in the next one ends nothing more.
        self._after_cr = False
        self._started = False

    def feed(self, chunk: bytes) -> list[str]:
        """The ``data`` of every event completed by ``chunk``, in order."""
        if not chunk:
            return []
        buffer = self._buffer
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._after_cr = False
        buffer += chunk
        if not self._started:
            if len(buffer) < len(_BOM) and _BOM.startswith(bytes(buffer)):
                return []  # maybe a BOM, not whole yet
            self._started = True
            if buffer.startswith(_BOM):
                del buffer[: len(_BOM)]
        events: list[str] = []
        if b"\r" not in buffer:  # LF only, as every AG-UI encoder writes: lines split in C
            last = buffer.rfind(b"\n")
            if last >= 0 and not self._data:
                last = self._plain(buffer, last, events)
            if last >= 0:
                lines = bytes(buffer[:last]).split(b"\n")
                del buffer[: last + 1]
                self._lines(lines, events)
            if self._size + len(buffer) > self.max_event:
                self._too_large()
            return events
        start = 0
        end = len(buffer)
        while start < end:
            lf = buffer.find(b"\n", start)
            cr = buffer.find(b"\r", start, lf if lf >= 0 else end)
            if cr >= 0:
                stop, next_start = cr, cr + 1
                if next_start < end and buffer[next_start] == 0x0A:
                    next_start += 1
                elif next_start == end:
                    self._after_cr = True
            elif lf >= 0:
                stop, next_start = lf, lf + 1
            else:
                break
            self._line(bytes(buffer[start:stop]), events)
            start = next_start
        del buffer[:start]
        if self._size + len(buffer) > self.max_event:
            self._too_large()
        return events

    def _plain(self, buffer: bytearray, last: int, events: list[str]) -> int:
        """At an event's start, LF-ended lines up to ``last`` (an LF): if the events they end
        are each one ``data: `` line and nothing else (what AG-UI encoders write), their data
        onto ``events``, cut apart in C, and taken out of ``buffer``. Returns where ``last``
        is now: the same if nothing was taken, below 0 if every line was."""
        end = buffer.rfind(b"\n\n", 0, last + 1)  # where the last whole event ends
        if end < 0 or end + 2 > self.max_event:  # none, or one of them might be too large
            return last
        text = bytes(buffer[: end + 2])
        count = text.count(b"\n\ndata: ") + 1
        if not text.startswith(b"data: ") or text.count(b"\n") != 2 * count:
            return last  # another field, a comment, a blank line more: line by line
        values = text[6:-2].replace(b"\n\ndata: ", b"\n").decode("utf-8", errors="replace")
        events += values.split("\n")
        del buffer[: end + 2]
        return last - end - 2

    def _lines(self, lines: list[bytes], events: list[str]) -> None:
        """:meth:`_line` for each of ``lines``, with the common ``data:`` line first."""
        data, size, bound = self._data, self._size, self.max_event
        for raw in lines:
            if raw[:5] == b"data:":
                value = raw[6:] if raw[5:6] == b" " else raw[5:]
                size += len(value) + 1
                if size > bound:
                    self._too_large()
                data.append(value.decode("utf-8", errors="replace"))
            elif not raw:
                if data:
                    events.append(data[0] if len(data) == 1 else "\n".join(data))
                    data = []
                size = 0
            elif raw == b"data":  # a field without a colon: its value is empty
                size += 1
                if size > bound:
                    self._too_large()
                data.append("")
        self._data, self._size = data, size

    def _line(self, raw: bytes, events: list[str]) -> None:
        if not raw:
            if self._data:
                events.append("\n".join(self._data))
            self._data, self._size = [], 0
            return
        if raw[:1] == b":":
            return
        name, colon, value = raw.partition(b":")
        if name != b"data":
            return
        if colon and value[:1] == b" ":
            value = value[1:]
        self._size += len(value) + 1
        if self._size > self.max_event:
            self._too_large()
        self._data.append(value.decode("utf-8", errors="replace"))

    def _too_large(self) -> None:
        raise LimitExceeded(
            "frame_too_large",
            f"an event of the stream is larger than {self.max_event} bytes",
            limit=self.max_event,
        )


# -- the server side ------------------------------------------------------------------------


def message(data: bytes, event_id: str | None = None) -> bytes:
    """One event: ``data`` must hold no line end (compact JSON never does)."""
    if event_id is None:
        return b"data: " + data + b"\n\n"
    return b"id: " + event_id.encode() + b"\ndata: " + data + b"\n\n"


def last_id(event_id: str) -> bytes:
    """An event with an id and no data: it moves the client's last event id and dispatches
    nothing (WHATWG: the id is taken before an event without data is dropped)."""
    return b"id: " + event_id.encode() + b"\n\n"


def comment(text: str) -> bytes:
    return b": " + text.encode() + b"\n\n"
