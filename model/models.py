"""Models by name or path: bundled HF configs and their parameter lists.

The parameter list is the model's own ``named_parameters()`` (tied weights
counted once), built by transformers on the meta device, so a 70B model costs
no memory and no download.
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from model.errors import InputError

CONFIG_DIR = Path(__file__).parent / "configs"
SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")


def bundled_models() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


@dataclass(frozen=True)
class Param:
    """One parameter tensor of the HF model."""
    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def rows(self) -> int:
        """Rows of the row-major 2-D view (1-D tensors are one row)."""
        return self.shape[0] if len(self.shape) == 2 else 1

    @property
    def cols(self) -> int:
        return self.shape[1] if len(self.shape) == 2 else self.shape[0]


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only LLM: the facts layouts need, plus the raw HF config."""
    name: str
    model_type: str
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    qkv_bias: bool
    config: dict = field(compare=False, hash=False, repr=False)

    def hf_config(self):
        from transformers import AutoConfig
        cfg = dict(self.config)
        model_type = cfg.pop("model_type")
        for key in ("architectures", "transformers_version", "_name_or_path"):
            cfg.pop(key, None)
        return AutoConfig.for_model(model_type, **cfg)

    @functools.cached_property
    def params(self) -> tuple[Param, ...]:
        return tuple(_meta_params(self))

    def param(self, name: str) -> Param:
        return self.param_index[name]

    @functools.cached_property
    def param_index(self) -> dict[str, Param]:
        return {p.name: p for p in self.params}

    @property
    def numel(self) -> int:
        return sum(p.numel for p in self.params)


# under the project tree (not the working directory), so commands leave nothing where they run
PARAM_CACHE = Path(__file__).resolve().parent.parent / "build" / "cache" / "params"


def _cache_key(spec: ModelSpec) -> str:
    import hashlib
    from importlib.metadata import version
    blob = json.dumps(spec.config, sort_keys=True) + "|transformers " + version("transformers")
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _meta_params(spec: ModelSpec) -> list[Param]:
    """``named_parameters()`` of the model built on the meta device, cached by config.

    Importing torch and transformers costs seconds; the list they give is
    cached under build/cache/params/ keyed by the config and the
    transformers version, so later runs read it back instead.
    """
    path = PARAM_CACHE / f"{_cache_key(spec)}.json"
    try:
        return [Param(n, tuple(shape)) for n, shape in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError):
        pass
    import torch
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(spec.hf_config())
    # named_parameters() already yields a tied tensor once.
    params = [Param(n, tuple(p.shape)) for n, p in m.named_parameters()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps([[p.name, list(p.shape)] for p in params]))
        tmp.replace(path)
    except OSError:
        pass    # a read-only tree just goes without the cache
    return params


def load_model(name_or_path: str) -> ModelSpec:
    """Resolve a bundled model name or a path to an HF ``config.json``."""
    path = CONFIG_DIR / f"{name_or_path}.json"
    source = name_or_path
    if not path.is_file():
        path = Path(name_or_path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise InputError(f"unknown model {name_or_path!r}: not one of "
                             f"{', '.join(bundled_models())} and no such config file")
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{source}: cannot read config: {e}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: line {e.lineno} column {e.colno}: invalid JSON: {e.msg}") from None
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: a config must be a JSON object")
    return spec_from_config(cfg, name=path.stem if path.parent == CONFIG_DIR else str(path), origin=str(path))


def spec_from_config(cfg: dict, name: str, origin: str = "<config>") -> ModelSpec:
    mt = cfg.get("model_type")
    if mt not in SUPPORTED_MODEL_TYPES:
        raise InputError(f"{origin}: model_type {mt!r} is not a Llama/Qwen2/Mistral-style decoder "
                         f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    for key in required:
        v = cfg.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise InputError(f"{origin}: field {key!r} must be a positive integer, got {v!r}")
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    if not isinstance(kv, int) or kv <= 0 or heads % kv:
        raise InputError(f"{origin}: num_key_value_heads {kv!r} must be a positive divisor of "
                         f"num_attention_heads {heads}")
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    if head_dim * heads != cfg["hidden_size"] and "head_dim" not in cfg:
        raise InputError(f"{origin}: hidden_size {cfg['hidden_size']} is not a multiple of "
                         f"num_attention_heads {heads}")
    qkv_bias = mt == "qwen2" or bool(cfg.get("attention_bias", False))
    return ModelSpec(name=name, model_type=mt, vocab=cfg["vocab_size"], hidden=cfg["hidden_size"],
                     intermediate=cfg["intermediate_size"], layers=cfg["num_hidden_layers"],
                     heads=heads, kv_heads=kv, head_dim=head_dim,
                     tied=bool(cfg.get("tie_word_embeddings", False)), qkv_bias=qkv_bias,
                     config=dict(cfg))


def random_state_dict(spec: ModelSpec, seed: int = 0):
    """Real tensors of a randomly initialised HF model (fixed seed), fp32."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    m = AutoModelForCausalLM.from_config(spec.hf_config(), dtype=torch.float32)
    # detached views keep the parameters' storage: no second copy of the model
    return {n: p.detach() for n, p in m.named_parameters()}
