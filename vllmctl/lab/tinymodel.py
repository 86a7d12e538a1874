"""The lab's tiny Llama checkpoint: built locally with numpy, safetensors and tokenizers (no torch).

Deterministic bytes, cached under a content key, built atomically; real vLLM (CPU build) can serve it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from vllmctl.errors import VllmctlError

# Bump when the generated files change in a way the inputs below do not capture.
FORMAT_VERSION = 1
SEED = 20240601
VOCAB_SIZE = 512
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
SPECIAL_TOKENS = (BOS, EOS, PAD)
WEIGHTS_FILE = "model.safetensors"
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    WEIGHTS_FILE,
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)

_CORPUS_LINES = (
    "vllmctl provisions bare metal GPU hosts that serve large language models with vLLM or SGLang.",
    "An inventory names the hosts, their GPUs, the driver, the engine and the models to deploy.",
    "The planner estimates weights, activations, CUDA graphs and the KV cache for every GPU.",
    "Each operation reads facts from a host and yields the commands that bring it to the desired state.",
    "When nothing needs to change, the operation says why and the host is left untouched.",
    "A release is kept on the host so that a rollback can activate the previous one quickly.",
    "The health check polls the server until it answers, with growing waits up to a deadline.",
    "Metrics such as requests running, requests waiting and cache usage come from the metrics page.",
    "The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly.",
    "Pack my box with five dozen liquor jugs; how vexingly quick daft zebras jump!",
    "Hello, world. Hello, assistant. Hello, user. What is the capital of France? Paris is.",
    "system: You are a helpful assistant.\nuser: Tell me a story.\nassistant: Once upon a time,",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 2048 4096 8192 65536.",
    "Punctuation and symbols: ( ) [ ] { } < > = + - * / % & | ^ ~ ! ? . , ; : ' \" # @ $ _",
    "def serve(model, port):\n    return start(model=model, port=port, host='127.0.0.1')\n",
    "The tokenizer learns byte pairs from this small text, so any input still encodes to bytes.",
    "Ceci est une phrase en français. Dies ist ein deutscher Satz. Esto es una frase en español.",
    "Every error carries a hint, and input errors quote the file, the line and the column.",
    "Facts go stale when an earlier step changes the host, so they are gathered again afterwards.",
    "Temperature zero should give the same text for the same prompt every single time.",
)


def tiny_corpus() -> list[str]:
    """The built-in training text for the tokenizer: fixed, so the tokenizer is reproducible."""
    return [line for _ in range(4) for line in _CORPUS_LINES]


def tiny_config() -> dict[str, Any]:
    """The Hugging Face `config.json` of the tiny Llama; head_dim 64 because vLLM's CPU attention needs it."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "vocab_size": VOCAB_SIZE,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "bos_token_id": SPECIAL_TOKENS.index(BOS),
        "eos_token_id": SPECIAL_TOKENS.index(EOS),
        "pad_token_id": SPECIAL_TOKENS.index(PAD),
        # numpy has no bfloat16; vLLM's CPU backend serves float32 (and casts float16 anyway).
        "torch_dtype": "float32",
        "use_cache": True,
    }


def weight_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Tensor name → shape for a LlamaForCausalLM with this config, as vLLM's loader expects them."""
    hidden = int(config["hidden_size"])
    inter = int(config["intermediate_size"])
    vocab = int(config["vocab_size"])
    head_dim = int(config["head_dim"])
    q_out = int(config["num_attention_heads"]) * head_dim
    kv_out = int(config["num_key_value_heads"]) * head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (vocab, hidden),
        "model.norm.weight": (hidden,),
        "lm_head.weight": (vocab, hidden),
    }
    for layer in range(int(config["num_hidden_layers"])):
        prefix = f"model.layers.{layer}"
        shapes |= {
            f"{prefix}.input_layernorm.weight": (hidden,),
            f"{prefix}.post_attention_layernorm.weight": (hidden,),
            f"{prefix}.self_attn.q_proj.weight": (q_out, hidden),
            f"{prefix}.self_attn.k_proj.weight": (kv_out, hidden),
            f"{prefix}.self_attn.v_proj.weight": (kv_out, hidden),
            f"{prefix}.self_attn.o_proj.weight": (hidden, q_out),
            f"{prefix}.mlp.gate_proj.weight": (inter, hidden),
            f"{prefix}.mlp.up_proj.weight": (inter, hidden),
            f"{prefix}.mlp.down_proj.weight": (hidden, inter),
        }
    return shapes


def tiny_weights(
    config: dict[str, Any], seed: int = SEED, shapes: dict[str, tuple[int, ...]] | None = None
) -> dict[str, np.ndarray]:
    """Random-normal weights (norms at one) from a fixed seed, in a fixed name order (`shapes`: another
    architecture's, else the tiny Llama's)."""
    rng = np.random.default_rng(seed)
    std = float(config["initializer_range"])
    weights: dict[str, np.ndarray] = {}
    for name, shape in sorted((shapes or weight_shapes(config)).items()):
        if name.endswith("norm.weight"):
            weights[name] = np.ones(shape, dtype=np.float32)
        else:
            weights[name] = rng.normal(0.0, std, size=shape).astype(np.float32)
    return weights


def train_tokenizer(corpus: list[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """A byte-level BPE (GPT-2 style) trained on `corpus`; all 256 bytes are in it, so nothing is unknown."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return tokenizer


def tokenizer_config() -> dict[str, Any]:
    """`tokenizer_config.json`: fast tokenizer, special tokens and a plain chat template."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 2048,
        "chat_template": CHAT_TEMPLATE,
    }


def generation_config(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "bos_token_id": config["bos_token_id"],
        "eos_token_id": config["eos_token_id"],
        "pad_token_id": config["pad_token_id"],
    }


def content_key(config: dict[str, Any] | None = None) -> str:
    """A hash of every input to the build (`config`: a variant's), naming the cache entry; same inputs →
    same directory."""
    inputs = {
        "format": FORMAT_VERSION,
        "seed": SEED,
        "config": config or tiny_config(),
        "corpus": tiny_corpus(),
        "tokenizer_config": tokenizer_config(),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def default_models_dir() -> Path:
    """`$VLLMCTL_CACHE/lab/models`, or `/var/cache/vllmctl/lab/models`."""
    return Path(os.environ.get("VLLMCTL_CACHE", "/var/cache/vllmctl")) / "lab" / "models"


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")


def write_tiny_model(
    target: Path, config: dict[str, Any] | None = None, weights: dict[str, np.ndarray] | None = None
) -> None:
    """Write every file of the tiny model (or another `config` with its `weights`, the same tokenizer) into
    the existing, empty directory `target`."""
    config = config or tiny_config()
    _write_json(target / "config.json", config)
    _write_json(target / "generation_config.json", generation_config(config))
    found = weights if weights is not None else tiny_weights(config)
    save_file(found, str(target / WEIGHTS_FILE), metadata={"format": "pt"})
    tokenizer = train_tokenizer(tiny_corpus())
    (target / "tokenizer.json").write_text(tokenizer.to_str(pretty=True) + "\n")
    _write_json(target / "tokenizer_config.json", tokenizer_config())
    _write_json(target / "special_tokens_map.json", {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD})


def build_once(final: Path, files: Sequence[str], write: Callable[[Path], None], what: str) -> Path:
    """`final`, written by `write` into a staging folder beside it and renamed into place unless a complete
    build (every one of `files`) is already there; concurrent builds of the same bytes are harmless."""
    if all((final / name).is_file() for name in files):
        return final
    root = final.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
    except OSError as exc:
        raise VllmctlError(
            f"cannot create the {what} cache at {root}: {exc.strerror}",
            "set VLLMCTL_CACHE to a writable directory",
        ) from exc
    try:
        write(staging)
        staging.chmod(0o755)
        if all((final / name).is_file() for name in files):
            return final  # another process finished the same build meanwhile
        if final.exists():
            # A half-deleted entry; its name promises complete, generated files.
            shutil.rmtree(final)
        try:
            staging.rename(final)
        except OSError:
            # Another process finished the same build first; its bytes are identical, keep them.
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def ensure_tiny_model(cache_dir: Path | None = None) -> Path:
    """Return the directory of the tiny model, building it once under `cache_dir/tiny-llama-<key>`."""
    root = cache_dir if cache_dir is not None else default_models_dir()
    return build_once(root / f"tiny-llama-{content_key()}", MODEL_FILES, write_tiny_model, "tiny model")


def tiny_model_digest(path: Path) -> str:
    """sha256 over the model's file names and bytes; equal for two builds of the same inputs."""
    digest = hashlib.sha256()
    for name in MODEL_FILES:
        digest.update(name.encode() + b"\0")
        digest.update((path / name).read_bytes())
    return digest.hexdigest()
