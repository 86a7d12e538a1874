"""Inventory fields for presets: use_case, sampling (ranges, exclusive bounds), multimodal, workload."""

from __future__ import annotations

from collections.abc import Callable

from vllmctl.inventory.model import Inventory

Problems = Callable[[str], list[str]]
Load = Callable[[str], Inventory]


def test_sampling_ranges_are_reported_at_their_line_and_column(problems: Problems) -> None:
    assert problems(
        """\
        vllmctl: 1
        hosts: {a: {address: 10.0.0.1}}
        models:
          m:
            source: org/m
            hosts: a
            sampling:
              temperature: 2.5
              top_p: 0
              top_k: -2
              repetition_penalty: 0
              presence_penalty: -2.1
              frequency_penalty: 3
              seed: 1.5
              max_tokens: 0
        """
    ) == [
        "inv.yml:8:20: models.m.sampling.temperature: must be <= 2, got number 2.5\n"
        "  hint: Randomness; 0 is greedy (0–2).",
        "inv.yml:9:14: models.m.sampling.top_p: must be > 0, got integer 0\n"
        "  hint: Nucleus sampling mass, in (0, 1].",
        "inv.yml:10:14: models.m.sampling.top_k: must be >= -1, got integer -2\n"
        "  hint: Sample from the k most likely tokens; -1 (or 0) means all.",
        "inv.yml:11:27: models.m.sampling.repetition_penalty: must be > 0, got integer 0\n"
        "  hint: Penalty on tokens already in prompt or output; 1.0 is off (> 0).",
        "inv.yml:12:25: models.m.sampling.presence_penalty: must be >= -2, got number -2.1\n"
        "  hint: OpenAI presence penalty (−2–2).",
        "inv.yml:13:26: models.m.sampling.frequency_penalty: must be <= 2, got integer 3\n"
        "  hint: OpenAI frequency penalty (−2–2).",
        "inv.yml:14:13: models.m.sampling.seed: expected an integer, got number 1.5\n"
        "  hint: Engine-wide random seed (integer, ≥ 0).",
        "inv.yml:15:19: models.m.sampling.max_tokens: must be >= 1, got integer 0\n"
        "  hint: Default output length limit (tokens).",
    ]


def test_use_case_workload_and_sampling_keys_are_checked(problems: Problems) -> None:
    assert problems(
        """\
        vllmctl: 1
        hosts: {a: {address: 10.0.0.1}}
        models:
          m: {source: org/m, hosts: a, use_case: coding, workload: shared}
          n: {source: org/n, hosts: a, port: 8001, sampling: {temprature: 0.1, top_p: 1.01}}
          o: {source: org/o, hosts: a, port: 8002, multimodal: {images_per_prompt: -1, audio: 1}}
        """
    ) == [
        "inv.yml:4:42: models.m.use_case: must be one of code, factual, summarization, translation, chat, "
        "creative; got string 'coding'\n  hint: did you mean 'code'?",
        "inv.yml:4:60: models.m.workload: must be one of shared_prefix, independent; got string 'shared'\n"
        "  hint: did you mean 'shared_prefix'?",
        "inv.yml:5:55: models.n.sampling.temprature: unknown key 'temprature'\n"
        "  hint: did you mean 'temperature'?",
        "inv.yml:5:79: models.n.sampling.top_p: must be <= 1, got number 1.01\n"
        "  hint: Nucleus sampling mass, in (0, 1].",
        "inv.yml:6:76: models.o.multimodal.images_per_prompt: must be >= 0, got integer -1\n"
        "  hint: Images per prompt.",
        "inv.yml:6:80: models.o.multimodal.audio: unknown key 'audio'\n"
        "  hint: allowed keys here: images_per_prompt, videos_per_prompt",
    ]


def test_boundary_values_are_accepted_and_typed(load: Load) -> None:
    inv = load(
        """\
        vllmctl: 1
        hosts: {a: {address: 10.0.0.1}}
        models:
          m:
            source: org/m
            hosts: a
            use_case: code
            workload: shared_prefix
            multimodal: {images_per_prompt: 2}
            sampling: {temperature: 0, top_p: 1, top_k: 2, repetition_penalty: 0.01, presence_penalty: -2,
                       frequency_penalty: 2, seed: 0, max_tokens: 1}
        """
    )
    model = inv.models["m"]
    assert model.use_case == "code"
    assert model.workload == "shared_prefix"
    assert model.multimodal == {"images_per_prompt": 2}
    assert model.sampling == {
        "temperature": 0.0,
        "top_p": 1.0,
        "top_k": 2,
        "repetition_penalty": 0.01,
        "presence_penalty": -2.0,
        "frequency_penalty": 2.0,
        "seed": 0,
        "max_tokens": 1,
    }
    assert isinstance(model.sampling["top_k"], int) and isinstance(model.sampling["temperature"], float)


def test_defaults_leave_sampling_to_the_model(load: Load) -> None:
    model = load("vllmctl: 1\nhosts: {a: {}}\nmodels: {m: {source: org/m, hosts: a}}\n").models["m"]
    assert (model.use_case, model.sampling, model.multimodal, model.workload) == (None, {}, {}, "independent")
