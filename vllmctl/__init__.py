"""vllmctl: declarative provisioning for GPU fleets serving LLMs with vLLM or SGLang."""

__version__ = "0.1.0"
