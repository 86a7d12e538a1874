"""SSE parsing of OpenAI-style completion streams, however the network splits them."""

from __future__ import annotations

import json

import pytest

from vllmctl.bench.sse import SseParser, classify

TOKEN = {
    "id": "cmpl-1",
    "object": "text_completion",
    "choices": [{"index": 0, "text": " héllo", "logprobs": None}],
}
USAGE = {
    "id": "cmpl-1",
    "choices": [],
    "usage": {"prompt_tokens": 65, "completion_tokens": 2, "total_tokens": 67},
}
STREAM = (
    f"data: {json.dumps(TOKEN, ensure_ascii=False)}\n\n"
    ": keep-alive\n\n"
    f"data: {json.dumps(TOKEN, ensure_ascii=False)}\n\n"
    f"data: {json.dumps(USAGE)}\n\n"
    "data: [DONE]\n\n"
).encode()


def _all_events(chunks: list[bytes]) -> list[str]:
    parser = SseParser()
    events = [event for chunk in chunks for event in parser.feed(chunk)]
    return events + parser.close()


def test_a_whole_stream_gives_two_tokens_the_usage_and_done() -> None:
    kinds = [classify(event).kind for event in _all_events([STREAM])]
    assert kinds == ["token", "token", "usage", "done"]
    assert classify(_all_events([STREAM])[0]).text == " héllo"
    assert classify(_all_events([STREAM])[2]).usage == {
        "prompt_tokens": 65,
        "completion_tokens": 2,
        "total_tokens": 67,
    }


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_reads_of_any_size_give_the_same_events_even_inside_a_utf8_character(size: int) -> None:
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert _all_events(chunks) == _all_events([STREAM])


def test_an_event_is_complete_only_at_its_blank_line() -> None:
    parser = SseParser()
    assert parser.feed(b'data: {"choices": [{"text": "a"}]}\n') == []
    assert parser.feed(b"\n") == ['{"choices": [{"text": "a"}]}']


def test_crlf_and_cr_line_endings_split_across_reads() -> None:
    parser = SseParser()
    assert parser.feed(b"data: [DONE]\r") == []
    assert parser.feed(b"\n\r") == []
    assert parser.feed(b"\ndata: x\r\r") == ["[DONE]"]  # the last \r may be half of a \r\n
    assert parser.feed(b"data: y\n\n") == ["x", "y"]


def test_multi_line_data_joins_with_newlines_and_other_fields_are_ignored() -> None:
    parser = SseParser()
    assert parser.feed(b'event: message\nid: 7\ndata: {"a":\ndata:1}\nretry: 5\n\n') == ['{"a":\n1}']


def test_a_stream_that_ends_without_its_final_blank_line_still_yields_the_event() -> None:
    parser = SseParser()
    assert parser.feed(b"data: [DONE]") == []
    assert parser.close() == ["[DONE]"]
    assert SseParser().close() == []


def test_error_events_carry_the_servers_message() -> None:
    message = classify('{"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}')
    assert (message.kind, message.error) == ("error", "engine died")
    assert classify('{"error": "overloaded"}').error == "overloaded"


def test_a_choice_with_empty_text_is_still_a_token_chunk() -> None:
    assert classify('{"choices": [{"index": 0, "text": ""}]}').kind == "token"
    assert classify('{"choices": [{"index": 0, "text": null}], "usage": null}').kind == "token"


def test_garbage_is_an_error_and_unknown_json_is_ignored() -> None:
    assert classify("<html>").kind == "error"
    assert classify('{"object": "ping"}').kind == "other"
    assert classify("[1, 2]").kind == "other"
