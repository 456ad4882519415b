"""The masks transformers builds for mha-viz's attention (registered with its mask interface by capture.register).

Every call gets what the model's "eager" implementation gets (transformers.masking_utils.eager_mask: an additive float
mask, 0 where a key may be seen and the dtype's minimum elsewhere) — except during a long recording (a Recorder with
tile_block whose calls are tiled): there the mask is left boolean (True = may attend; sdpa_mask with the same
arguments, so a sliding window, padding and an encoder's bidirectional mask are all the same mask), a quarter of the
bytes, and no [n, n] float (at 8,192 tokens: 64 MB instead of 268 MB, and no float copy to split). Such a mask is
remembered in the Recorder (bool_masks, by its storage), and the calls given it wrap the model's eager function
(converting): each block of rows handed to it becomes the additive float mask eager_mask would have made, row for
row, so the model computes exactly what it computes with "eager". Call.allowed is that boolean mask itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch


def additive(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean mask (block) as eager_mask makes it: 0 where allowed, the dtype's minimum elsewhere. Other masks
    as they are. Shapes: [b|1, 1|h, q|1, k] -> the same."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask, torch.zeros((), device=mask.device, dtype=dtype), torch.finfo(dtype).min)


def mask_key(mask: object) -> int | None:
    """A boolean mask's storage address (a slice or expansion of it has the same), else None."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        return None
    return mask.untyped_storage().data_ptr()


def _heads(config: object) -> int:
    try:
        return max(1, int(getattr(config, "num_attention_heads", 1) or 1))
    except (TypeError, ValueError):
        return 1


def long_mask(tile_block: int, made: dict, *args: object, **kwargs: object) -> torch.Tensor | None:
    """The mask for a call: boolean where the call will be tiled (its heads × queries × keys over ``tile_block``,
    > 0), remembered in ``made`` (storage -> (mask, the float dtype eager would use)); else eager_mask's."""
    from transformers.masking_utils import eager_mask, sdpa_mask

    q, kv = kwargs.get("q_length"), kwargs.get("kv_length")
    if args or not tile_block or not isinstance(q, int) or not isinstance(kv, int):
        return eager_mask(*args, **kwargs)
    if q * kv * _heads(kwargs.get("config")) <= tile_block:
        return eager_mask(**kwargs)
    kw = dict(kwargs)
    dtype = kw.pop("dtype", torch.float32)
    kw.pop("allow_is_causal_skip", None)
    mask = sdpa_mask(**kw, allow_is_causal_skip=False)  # [b, 1, q, kv] bool (True: may attend), or None
    key = mask_key(mask)
    if key is not None:
        made[key] = (mask, dtype)
    return mask


_CONVERTING: dict[tuple[Callable, torch.dtype], Callable] = {}


def converting(eager: Callable, dtype: torch.dtype) -> Callable:
    """The model's eager function, given its mask (block) as eager_mask would have made it from a boolean one. The same
    function object for the same (eager, dtype): its signature and source are eager's (``__wrapped__``)."""
    got = _CONVERTING.get((eager, dtype))
    if got is None:

        @functools.wraps(eager)
        def got(module, query, key, value, attention_mask, *args, **kwargs):
            return eager(module, query, key, value, additive(attention_mask, dtype), *args, **kwargs)

        got.converts_bool = True  # type: ignore[attr-defined]
        _CONVERTING[(eager, dtype)] = got
    return got
