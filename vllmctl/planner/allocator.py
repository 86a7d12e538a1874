"""What PyTorch's CUDA caching allocator counts as allocated for one tensor: vLLM's "Model loading took"
is the growth of `torch.cuda.max_memory_allocated` over the load, which counts whole blocks, not bytes."""

from __future__ import annotations

# c10/cuda/CUDACachingAllocator.cpp: every request is rounded to 512 bytes; one of 10 MiB or more gets a
# segment of its own rounded up to 2 MiB, and the segment is split only when more than 1 MiB would be
# left over (should_split: remaining > kSmallSize). Otherwise the tensor holds, and is counted with, the
# whole segment. Smaller requests share 2 MiB and 20 MiB segments that are split.
MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def allocated_block_bytes(size: float) -> float:
    """The bytes the allocator reports for a tensor of `size` bytes.

    Logged loads match it: Qwen2.5-7B's gate_up (259 MiB) and down (129.5 MiB) projections keep 1 and
    0.5 MiB of their segments, 0.056 GiB over 28 layers against the 0.055-0.057 GiB that every logged
    0.7-0.18 load shows above the parameters; Llama-3.1-8B's shapes are whole 2 MiB multiples and load
    at exactly their parameters.
    """
    rounded = -(-int(size) // MIN_BLOCK) * MIN_BLOCK
    if rounded < MIN_LARGE_ALLOC:
        return float(rounded)
    segment = -(-rounded // ROUND_LARGE) * ROUND_LARGE
    return float(segment if segment - rounded <= SMALL_SIZE else rounded)
