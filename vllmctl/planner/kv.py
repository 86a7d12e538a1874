"""vLLM V1 KV-cache layout: page size per layer kind, grouping of hybrid layers, and the block, token and
concurrency figures exactly as kv_cache_utils rounds them (num_blocks = available // page // group_size).
"""

from __future__ import annotations

from dataclasses import dataclass

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.params import kv_heads_per_rank


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KvLayout:
    """KV shape for the layers one GPU holds: per-kind layer counts and the shared page size."""

    kinds: tuple[tuple[str, int], ...]  # (kind, number of layers) in first-seen order
    page_bytes: int  # bytes of one block of one layer
    block_size: int
    sliding_window: int

    @property
    def num_layers(self) -> int:
        return sum(count for _, count in self.kinds)

    @property
    def bytes_per_token(self) -> float:
        return self.page_bytes * self.num_layers / self.block_size

    def groups(self) -> tuple[int, int]:
        """(group_size, number of groups) per vLLM's uniform-page-size grouping of hybrid models."""
        counts = [count for _, count in self.kinds]
        if len(counts) == 1:
            return counts[0], 1
        smallest, largest = min(counts), max(counts)
        size = largest if largest < smallest * 1.25 else smallest
        return size, sum(cdiv(count, size) for count in counts)

    def max_usage_bytes(self, kind: str, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Per-layer bytes one request at max_model_len can need (SlidingWindowSpec caps it; a linear-
        attention or Mamba state is one page whatever the length: v1/kv_cache_interface.py,
        MambaSpec.max_memory_usage_bytes without speculative blocks)."""
        if kind == "mamba":
            return self.page_bytes
        if kind == "sliding":
            tokens = min(self.sliding_window - 1 + max_num_batched_tokens, max_model_len)
            return (cdiv(tokens, self.block_size) + 1) * self.page_bytes
        return cdiv(max_model_len, self.block_size) * self.page_bytes

    def num_blocks(self, available_bytes: int) -> int:
        size, _ = self.groups()
        return max(available_bytes // self.page_bytes // size, 0)

    def tokens(self, num_blocks: int) -> int:
        _, count = self.groups()
        return num_blocks // count * self.block_size

    def needed_bytes(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """KV bytes one request at max_model_len needs; more than available is vLLM's startup error."""
        size, _ = self.groups()
        if len(self.kinds) == 1:
            kind, count = self.kinds[0]
            return count * self.max_usage_bytes(kind, max_model_len, max_num_batched_tokens)
        pages = sum(
            cdiv(self.max_usage_bytes(kind, max_model_len, max_num_batched_tokens), self.page_bytes)
            for kind, _ in self.kinds
        )
        return size * self.page_bytes * pages

    def max_concurrency(self, num_blocks: int, max_model_len: int, max_num_batched_tokens: int) -> float:
        size, _ = self.groups()
        per_request = size * sum(
            self.max_usage_bytes(kind, max_model_len, max_num_batched_tokens) for kind, _ in self.kinds
        )
        blocks_per_request = cdiv(per_request, self.page_bytes * size)
        return num_blocks / blocks_per_request if blocks_per_request else 0.0

    def largest_len_that_fits(self, available_bytes: int, limit: int, max_num_batched_tokens: int) -> int:
        """Binary search as vLLM's estimate_max_model_len; 0 when not even one token fits."""
        low, high = 0, limit
        while low < high:
            mid = (low + high + 1) // 2
            if self.needed_bytes(mid, max_num_batched_tokens) <= available_bytes:
                low = mid
            else:
                high = mid - 1
        return low


def kv_layout(
    arch: ModelArch,
    tp: int,
    layer_range: tuple[int, int],
    kv_cache_dtype: str,
    compute_capability: tuple[int, int],
    block_size: int | None = None,
) -> KvLayout:
    dtype_bytes = 1 if kv_cache_dtype.startswith("fp8") else arch.dtype_bytes
    kinds: dict[str, int] = {}
    for kind in arch.attention_kinds[layer_range[0] : layer_range[1]]:
        kinds[kind] = kinds.get(kind, 0) + 1
    if arch.is_mla:
        # One latent "head" of kv_lora_rank + rope dims, identical on every TP rank.
        size = block_size or (64 if compute_capability >= (9, 0) else 16)
        page = size * (arch.kv_lora_rank + arch.qk_rope_head_dim) * dtype_bytes
    else:
        size = block_size or 16
        page = 2 * size * kv_heads_per_rank(arch, tp) * arch.head_dim * dtype_bytes
    return KvLayout(tuple(kinds.items()), page, size, arch.sliding_window)
