"""What PyTorch's CUDA caching allocator counts as allocated for one tensor: vLLM's "Model loading took"
is the growth of `torch.cuda.max_memory_allocated` over the load, which counts whole blocks, not bytes."""

from __future__ import annotations

from vllmctl.planner.versions import Version

# c10/cuda/CUDACachingAllocator.cpp: every request is rounded to 512 bytes; one of 10 MiB or more gets a
# segment of its own rounded up to 2 MiB, and the segment is split only when more than 1 MiB would be
# left over (should_split: remaining > kSmallSize) and the request is below max_split_size. Otherwise the
# tensor holds, and is counted with, the whole segment. Smaller requests share 2 MiB and 20 MiB segments.
MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20
NO_MAX_SPLIT = float("inf")  # PyTorch's default: SIZE_MAX
# v1/worker/gpu_worker.py load_model, from 0.21.0 on CUDA: `_scoped_allocator_max_split(max_split_size_mb=20)`
# ("20 MiB is the minimum PyTorch allows"), so from then every weight of 20 MiB or more keeps its segment.
LOAD_MAX_SPLIT_SINCE: Version = (0, 21, 0)
LOAD_MAX_SPLIT = float(20 << 20)


def load_max_split(version: Version, vendor: str) -> float:
    """max_split_size in force while vLLM loads the weights (ROCm keeps PyTorch's default)."""
    return LOAD_MAX_SPLIT if version >= LOAD_MAX_SPLIT_SINCE and vendor == "nvidia" else NO_MAX_SPLIT


def allocated_block_bytes(size: float, max_split: float = NO_MAX_SPLIT) -> float:
    """The bytes the allocator reports for a tensor of `size` bytes allocated in a fresh segment.

    Logged loads match it: Qwen2.5-7B's gate_up (259 MiB) and down (129.5 MiB) projections keep 1 and
    0.5 MiB of their segments, 0.056 GiB over 28 layers against the 0.055-0.057 GiB that every logged
    0.7-0.18 load shows above the parameters; from 0.21 its o_proj (24.5 MiB) keeps 1.5 more (0.097, logged
    0.097 on 0.22.0). Llama-3.1-8B's shapes are whole 2 MiB multiples and load at exactly their bytes.
    """
    rounded = -(-int(size) // MIN_BLOCK) * MIN_BLOCK
    if rounded < MIN_LARGE_ALLOC:
        return float(rounded)
    segment = -(-rounded // ROUND_LARGE) * ROUND_LARGE
    if rounded >= max_split or segment - rounded <= SMALL_SIZE:
        return float(segment)
    return float(rounded)
