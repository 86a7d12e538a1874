"""Server-sent events as OpenAI-compatible servers stream them: bytes in, events out, split reads welcome.

Pure: `SseParser.feed` takes whatever a network read returned; `classify` turns one event into a message.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

_LINE_END = re.compile(r"\r\n|\r|\n")

MessageKind = Literal["token", "usage", "done", "error", "other"]


@dataclass(frozen=True)
class StreamMessage:
    """One meaningful event of a `/v1/completions` stream."""

    kind: MessageKind
    text: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    error: str = ""


@dataclass
class SseParser:
    """Incremental SSE reader (WHATWG rules): an event ends at a blank line; `data:` lines join with '\\n'."""

    _decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")()
    )
    _pending: str = ""
    _data: list[str] = field(default_factory=list)

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event completed by this chunk, in order."""
        self._pending += self._decoder.decode(chunk)
        events: list[str] = []
        while True:
            line, sep, rest = _split_line(self._pending)
            if not sep:
                return events
            self._pending = rest
            if line == "":
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
            elif line.startswith(":"):
                continue  # a comment, used by servers as a keep-alive ping
            else:
                name, _, value = line.partition(":")
                if name == "data":
                    self._data.append(value.removeprefix(" "))

    def close(self) -> list[str]:
        """Events left when the stream ends without a final blank line (some servers omit it)."""
        tail = self.feed(b"\n\n") if self._pending or self._data else []
        return tail


def _split_line(text: str) -> tuple[str, str, str]:
    """The first line and the rest, for any SSE line ending (\\n, \\r\\n, \\r); none yet: ('', '', text)."""
    found = _LINE_END.search(text)
    if found is None or (found.group() == "\r" and found.end() == len(text)):
        return "", "", text  # no line end yet, or a \r that may be the first half of \r\n
    return text[: found.start()], found.group(), text[found.end() :]


def _error_text(payload: Any) -> str:
    if isinstance(payload, dict):
        return str(payload.get("message") or payload)
    return str(payload)


def classify(data: str) -> StreamMessage:
    """What one event's data means: a token chunk, the usage summary, the end, or an error."""
    if data.strip() == "[DONE]":
        return StreamMessage("done")
    try:
        payload = json.loads(data)
    except ValueError:
        return StreamMessage("error", error=f"not JSON in the stream: {data[:200]!r}")
    if not isinstance(payload, dict):
        return StreamMessage("other")
    if "error" in payload:
        return StreamMessage("error", error=_error_text(payload["error"]))
    choices = payload.get("choices")
    if choices:
        # A chunk with a choice is a token chunk even with empty text (special tokens), as in vLLM's client.
        return StreamMessage("token", text=str(choices[0].get("text") or ""))
    usage = payload.get("usage")
    if isinstance(usage, dict):
        return StreamMessage("usage", usage={k: int(v) for k, v in usage.items() if isinstance(v, int)})
    return StreamMessage("other")
