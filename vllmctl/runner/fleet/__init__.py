"""What a run deploys, read from the inventory at the edge: host selection, the plans and per-host contexts,
secrets and SSH remotes, refusals placed in the inventory file, local model staging, LoRA args, the KV each
release records and the CUDA each engine needs (read from its package index)."""
