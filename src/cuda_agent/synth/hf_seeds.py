"""Seed operators from the installed ``transformers`` (optional): activations, norms, rotary
embeddings, attention, MLP and decoder blocks of decoder-only model families.

Classes are found by introspection (name suffix in each ``modeling_<type>`` module) and built
from ``AutoConfig.for_model`` with the running tensor's hidden size, so the rendered tasks
import from transformers instead of copying its code.  Whatever fails to import or to run is
reported by the crawl, not raised.
"""

from __future__ import annotations

import importlib
import inspect

from .ops import OpSpec

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo2", "granite",
               "starcoder2", "cohere", "gpt_neox")

_ATT = lambda s: s[-1] % 64 == 0 and s[-1] <= 4096  # noqa: E731
_CFG = ("AutoConfig.for_model('{mt}', hidden_size={{hidden_size}}, intermediate_size={{intermediate_size}}, "
        "num_attention_heads={{num_heads}}, num_key_value_heads={{num_heads}}, attn_implementation='eager')")
_POS = "{m}[1]({x}, torch.arange({x}.shape[1], device={x}.device).unsqueeze(0))"


def transformers_seeds() -> tuple[list[OpSpec], dict[str, str]]:
    """(specs, skipped api -> reason).  Empty when transformers is not installed."""
    try:
        import torch.nn as nn
        import transformers  # noqa: F401
        import transformers.activations as acts
    except Exception as e:  # noqa: BLE001 - optional dependency
        return [], {"transformers": f"not importable ({type(e).__name__}: {e})"}
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return _collect(nn, acts)
    finally:
        hf_logging.set_verbosity(verbosity)


def _collect(nn, acts) -> tuple[list[OpSpec], dict[str, str]]:  # noqa: ANN001
    specs: list[OpSpec] = []
    skipped: dict[str, str] = {}
    for name, cls in sorted(vars(acts).items()):
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module) and cls.__module__ == acts.__name__):
            continue
        api = f"transformers.activations.{name}"
        if name == "LinearActivation":
            skipped[api] = "no compute (identity)"
            continue
        specs.append(OpSpec(name=api, category="transformers", api=api, expr="{m}({x})", module=f"{name}()",
                            families=("seq", "vec"), imports=(f"from transformers.activations import {name}",),
                            source="transformers.activations"))
    for mt in MODEL_TYPES:
        modname = f"transformers.models.{mt}.modeling_{mt}"
        try:
            mod = importlib.import_module(modname)
        except Exception as e:  # noqa: BLE001
            skipped[modname] = f"not importable ({type(e).__name__})"
            continue
        classes = {n: c for n, c in vars(mod).items()
                   if inspect.isclass(c) and issubclass(c, nn.Module) and c.__module__ == modname}
        rot = next((n for n in classes if n.endswith("RotaryEmbedding")), None)
        cfg = _CFG.format(mt=mt)
        base_imports = ("from transformers import AutoConfig",)
        for n in sorted(classes):
            api = f"{modname}.{n}"
            imp = f"from {modname} import {n}" + (f", {rot}" if rot and rot != n and
                                                 (n.endswith("Attention") or n.endswith(("DecoderLayer", "Layer"))) else "")
            common = dict(category="transformers", api=api, families=("seq",), ranks=(3,),
                          source="transformers.models", imports=base_imports + (imp,))
            if n.endswith(("RMSNorm", "LayerNorm")):
                specs.append(OpSpec(name=api, expr="{m}({x})", module=f"{n}({{hidden_size}})", **common))
            elif n.endswith("MLP"):
                specs.append(OpSpec(name=api, expr="{m}({x})", module=f"{n}({cfg})", guard=_ATT, **common))
            elif n.endswith("Attention") and rot:
                specs.append(OpSpec(name=api, module=f"nn.ModuleList([{n}({cfg}, layer_idx=0), {rot}({cfg})])",
                                    expr="{m}[0]({x}, position_embeddings=" + _POS + ", attention_mask=None)[0]",
                                    guard=_ATT, **common))
            elif n.endswith(("DecoderLayer", "Layer")) and rot:
                specs.append(OpSpec(name=api, module=f"nn.ModuleList([{n}({cfg}, layer_idx=0), {rot}({cfg})])",
                                    expr="{m}[0]({x}, position_embeddings=" + _POS + ", attention_mask=None)",
                                    guard=_ATT, **common))
            elif n.endswith("RotaryEmbedding") and hasattr(mod, "apply_rotary_pos_emb"):
                heads = "{x}.unflatten(-1, ({num_heads}, -1)).transpose(1, 2)"
                common["imports"] = base_imports + (f"from {modname} import {n}, apply_rotary_pos_emb",)
                specs.append(OpSpec(
                    name=api, module=f"{n}({cfg})",
                    expr=f"apply_rotary_pos_emb({heads}, {heads}, *{{m}}({{x}}, torch.arange({{x}}.shape[1], "
                         "device={x}.device).unsqueeze(0)))[0].transpose(1, 2).flatten(2)",
                    guard=_ATT, **common))
            else:
                skipped[api] = "not a building block the crawl knows how to construct"
    return specs, skipped
