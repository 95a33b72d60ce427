"""verl 0.9.1's FSDP training engine on the CPU platform, and its weights.

Call these inside each rank's worker process, after
``torch.distributed.init_process_group("gloo", ...)`` and
:func:`model.cpu_platform.install` (the platform must be current before
``verl.workers.engine`` is first imported).

* :func:`build_engine`: ``FSDPEngineWithLMHead`` built and initialised as
  ``python -m gen capture`` runs it (see :mod:`model.capture`).
* :func:`local_shards`: this rank's FSDP2 shards (DTensor ``_local_tensor``),
  the input of the weight-sync hardware.
* :func:`full_weights`: verl's own colocated export,
  ``engine.get_per_tensor_param()`` (one all-gather per parameter).
"""
from __future__ import annotations

_WRAPPERS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")


def build_engine(model_dir: str, *, strategy: str = "fsdp2", seed: int = 0, lr: float = 1e-5,
                 total_steps: int = 1, max_token_len_per_gpu: int = 4096, **engine_options):
    """verl's ``FSDPEngineWithLMHead`` for the HF model in ``model_dir``, initialised.

    ``HFModelConfig(load_tokenizer=False, override_config={"attn_implementation": "sdpa"},
    use_remove_padding=False)``; ``FSDPEngineConfig(strategy, use_torch_compile=False, seed,
    use_remove_padding=False, max_token_len_per_gpu, **engine_options)`` with verl's defaults
    otherwise (fp32 master weights, bf16 autocast); ``FSDPOptimizerConfig(lr,
    total_training_steps=total_steps)`` (AdamW, constant schedule, grad clip 1.0);
    ``CheckpointConfig()``. ``strategy`` is verl's name: ``"fsdp"`` (FSDP1) or ``"fsdp2"``.
    The class is instantiated directly: ``EngineRegistry`` lists it for cuda/npu only.
    """
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    if strategy not in ("fsdp", "fsdp2"):
        raise ValueError(f"strategy {strategy!r}: verl's FSDP engine takes 'fsdp' or 'fsdp2'")
    model_config = HFModelConfig(path=str(model_dir), load_tokenizer=False,
                                 override_config={"attn_implementation": "sdpa"},
                                 use_remove_padding=False)
    engine_config = FSDPEngineConfig(strategy=strategy, use_torch_compile=False, seed=seed,
                                     use_remove_padding=False, max_token_len_per_gpu=max_token_len_per_gpu,
                                     **engine_options)
    optim_config = FSDPOptimizerConfig(lr=lr, total_training_steps=total_steps)
    engine = FSDPEngineWithLMHead(model_config, engine_config, optim_config, CheckpointConfig())
    engine.initialize()
    return engine


def clean_name(name: str) -> str:
    """The HF parameter name of a parameter of the FSDP-wrapped module (wrapper prefixes removed)."""
    for junk in _WRAPPERS:
        name = name.replace(junk + ".", "")
    for junk in _WRAPPERS:
        if name.endswith("." + junk):
            name = name[: -len(junk) - 1]
    return "" if name in _WRAPPERS else name


def local_shards(engine, spec=None) -> list:
    """This rank's FSDP2 shards: each parameter's DTensor ``_local_tensor``, detached fp32 CPU copies.

    In the order of ``spec.params`` (a :class:`model.models.ModelSpec`; HF parameter names,
    a tied weight once) when ``spec`` is given, after checking that the module holds exactly
    those parameters with those shapes; else in the module's ``named_parameters()`` order,
    which is the HF order (``fully_shard`` keeps the module tree).
    """
    import torch
    from torch.distributed.tensor import DTensor

    named = {}
    for name, p in engine.module.named_parameters():
        if not isinstance(p, DTensor):
            raise TypeError(f"parameter {name} is a {type(p).__name__}, not an FSDP2 DTensor "
                            f"(local_shards needs strategy 'fsdp2')")
        named[clean_name(name)] = p
    if spec is None:
        order = list(named)
    else:
        order = [p.name for p in spec.params]
        if sorted(order) != sorted(named):
            raise ValueError(f"the engine's parameters {sorted(set(named) ^ set(order))} differ from "
                             f"model {spec.name}'s")
        for p in spec.params:
            if tuple(named[p.name].shape) != p.shape:
                raise ValueError(f"{p.name}: engine shape {tuple(named[p.name].shape)} != model {p.shape}")
    return [named[n]._local_tensor.detach().to("cpu", torch.float32, copy=True) for n in order]


def full_weights(engine) -> dict:
    """verl's export ``engine.get_per_tensor_param()``, consumed: name -> fp32 CPU clone.

    Names as verl exports them; a tied ``lm_head.weight`` comes as its own entry.
    Collective: every rank must call it (one all-gather per parameter).
    """
    import torch
    gen, _peft = engine.get_per_tensor_param()
    return {name: t.detach().to("cpu", torch.float32, copy=True) for name, t in gen}
