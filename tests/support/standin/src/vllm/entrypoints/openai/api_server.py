"""vLLM's OpenAI server module path, provided by the vLLM stand-in (vllmctl lab; NOT vLLM), so a unit's
`python -m vllm.entrypoints.openai.api_server ...` runs the stand-in unchanged."""

from vllm_ray_standin.serve import main

if __name__ == "__main__":
    raise SystemExit(main())
