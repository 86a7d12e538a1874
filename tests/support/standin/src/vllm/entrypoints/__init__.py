"""Namespace of the vLLM stand-in (vllmctl lab): only the OpenAI entry point module, not vLLM."""
