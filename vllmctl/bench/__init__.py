"""The smoke benchmark (`smoke`: streamed completions at a few concurrency levels, summarized as `vllm bench
serve` does, checked against a model's SLO in `report`) and engine readiness (`readiness`, `health`)."""
