"""Benchmark prompts of a chosen length: exact with the model's tokenizer, approximate from a word list.

Each prompt starts differently so the server's prefix cache cannot serve one request from another.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vllmctl.errors import InputError

# Common English words, nearly all one token in the BPE vocabularies of Llama, Qwen, Mistral and GPT.
_WORD_TEXT = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more "
    "write go see number no way could people my than first water been call who oil its now find long "
    "down day did get come made may part over new sound take only little work know place year live me "
    "back give most very after thing our just name good sentence man think say great where help through "
    "much before line right too mean old any same tell boy follow came want show also around form three "
    "small set put end does another well large must big even such because turn here why ask went men read"
)
WORDS = tuple(_WORD_TEXT.split())


def word_prompts(count: int, input_tokens: int, seed: int = 0) -> list[str]:
    """`count` prompts of `input_tokens` words each (about as many tokens on a real LLM tokenizer)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(max(1, input_tokens))) for _ in range(count)]


def load_tokenizer(path: str | Path) -> Any:
    """A `tokenizers.Tokenizer` from a tokenizer.json or a model directory holding one."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise InputError(
            "--tokenizer needs the `tokenizers` package", "pip install 'vllmctl[lab]' or drop --tokenizer"
        ) from exc
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise InputError(f"no tokenizer.json at {path}", "give a model directory or its tokenizer.json")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # the tokenizers library raises plain Exception subclasses for bad files
        raise InputError(
            f"cannot read the tokenizer {file}: {exc}", "is it a Hugging Face tokenizer.json?"
        ) from exc


def token_prompts(tokenizer: Any, count: int, input_tokens: int, seed: int = 0) -> list[str]:
    """Prompts of exactly `input_tokens` tokens (without special tokens): random ids, decoded, re-encoded
    and cut, because decoding N ids can re-encode to a different count (as vLLM's random dataset does)."""
    rng = random.Random(seed)
    allowed = _clean_token_ids(tokenizer)
    prompts: list[str] = []
    for _ in range(count):
        ids = [rng.choice(allowed) for _ in range(max(1, input_tokens))]
        text = tokenizer.decode(ids)
        for _attempt in range(8):
            encoded = tokenizer.encode(text, add_special_tokens=False).ids
            if len(encoded) == input_tokens:
                break
            if len(encoded) < input_tokens:
                encoded = encoded + [rng.choice(allowed) for _ in range(input_tokens - len(encoded))]
            text = tokenizer.decode(encoded[:input_tokens])
        prompts.append(text)
    return prompts


def _clean_token_ids(tokenizer: Any) -> list[int]:
    """Ids that are not special and decode to whole characters, so prompts re-encode to their length."""
    special = set(tokenizer.get_added_tokens_decoder())
    clean: list[int] = []
    for token_id in range(tokenizer.get_vocab_size()):
        text = tokenizer.decode([token_id])
        if token_id not in special and text.strip() and "\ufffd" not in text:
            clean.append(token_id)
    return clean


def prompt_maker(input_tokens: int, tokenizer: Any = None) -> Callable[[int, int], list[str]]:
    """`(count, seed) -> prompts`: exact lengths with a tokenizer, word-list prompts without one."""
    if tokenizer is None:
        return lambda count, seed: word_prompts(count, input_tokens, seed)
    return lambda count, seed: token_prompts(tokenizer, count, input_tokens, seed)


def shaped_prompts(
    shapes: Sequence[tuple[int, int]], tokenizer: Any = None
) -> Callable[[int, int], list[str]]:
    """`(count, seed) -> prompts` whose input lengths follow `shapes` in turn (request i: shape i mod n), so
    a level's i-th request pairs with `LoadSpec.output_for(i)`."""
    makers = {length: prompt_maker(length, tokenizer) for length in {s[0] for s in shapes}}

    def make(count: int, seed: int) -> list[str]:
        return [makers[shapes[i % len(shapes)][0]](1, seed * 100_003 + i)[0] for i in range(count)]

    return make
