"""The vLLM stand-in of the vllmctl lab (NOT vLLM): a Ray-backed OpenAI-compatible test server."""
