"""What the tool knows about aten ops: which are views, matmuls or mask
applications, the FLOPs of matmuls and attention kernels, and whether a mask is causal."""

from __future__ import annotations

import torch

VIEW_OPS = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "transpose", "transpose_", "t",
    "t_", "permute", "expand", "expand_as", "slice", "select", "squeeze", "squeeze_",
    "unsqueeze", "unsqueeze_", "detach", "detach_", "alias", "split", "split_with_sizes",
    "unbind", "chunk", "as_strided", "narrow", "view_as", "unflatten", "lift_fresh",
    "diagonal", "unfold", "view_as_real", "view_as_complex", "_conj", "_neg_view",
    "real", "imag", "tensor_split", "movedim", "flatten", "_unsafe_split",
}
MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot",
              "_scaled_mm", "_int_mm", "linear", "convolution", "_convolution",
              "_addmm_activation"}


# Ops that apply an attention mask; a mask made from the inputs (padding masks) is an
# activation, so on real devices its content is checked too.
MASK_OPS = {"add", "add_", "sub", "masked_fill", "masked_fill_", "where"}


def is_attention_op(name):
    return (("scaled_dot_product" in name and "attention" in name)
            or name in ("_flash_attention_forward", "_efficient_attention_forward")) \
        and "backward" not in name


def bind_arguments(func, args, kwargs):
    """Arguments by schema name, so variants with different positions read alike."""
    bound = dict(kwargs or {})
    for schema_arg, value in zip(func._schema.arguments, args):
        bound[schema_arg.name] = value
    return bound


def matmul_flops(name, bound, out):
    """(FLOPs, the two multiplied operands) of a matmul-family op."""
    if name in ("convolution", "_convolution"):
        x, w = bound["input"], bound["weight"]
        # Every output (or, transposed, input) element costs one dot over the kernel.
        n = x.numel() if bound.get("transposed") else out.numel()
        return 2.0 * n * (w.numel() / max(w.shape[0], 1)), (x, w)
    if name == "linear":
        x, w = bound["input"], bound["weight"]
        return 2.0 * out.numel() * w.shape[-1], (x, w)
    if name in ("addmm", "baddbmm", "addbmm", "_addmm_activation"):
        a, b = bound.get("mat1", bound.get("batch1")), bound.get("mat2", bound.get("batch2"))
    elif name in ("mv", "addmv"):
        a, b = bound.get("mat", bound.get("self")), bound["vec"]
        return 2.0 * a.numel(), (a, b)
    elif name in ("dot", "vdot"):
        a, b = bound["self"], bound.get("tensor", bound.get("other"))
        return 2.0 * a.numel(), (a, b)
    else:  # mm, bmm, _scaled_mm, _int_mm: a [..., m, k] @ b [..., k, n]
        a, b = bound["self"], bound.get("mat2")
    return 2.0 * a.numel() * b.shape[-1], (a, b)


def attention_flops(name, bound):
    q, k, v = bound["query"], bound["key"], bound["value"]
    e, ev = q.shape[-1], v.shape[-1]
    # SDPA ops take [B, H, L, E]; the raw flash/efficient kernels [B, L, H, E].
    s = k.shape[1] if name.startswith("_flash") or name.startswith("_efficient") else k.shape[-2]
    rows = q.numel() / e  # B·H·L
    causal = bool(bound.get("is_causal", False)) or bound.get("custom_mask_type", 0) in (1, 2)
    mask = bound.get("attn_mask", bound.get("attn_bias", bound.get("bias")))
    return 2.0 * rows * s * (e + ev), causal, mask


def looks_causal(mask):
    """True if a square mask (bool keep/drop or additive float) is triangular-causal."""
    if not isinstance(mask, torch.Tensor) or mask.dim() < 2 or mask.device.type == "meta":
        return False
    n = mask.shape[-1]
    if mask.shape[-2] != n or n < 2 or mask.numel() > (1 << 26):
        return False
    if not (mask.dtype == torch.bool or mask.dtype.is_floating_point):
        return False
    with torch.no_grad():
        m = mask.reshape(-1, n, n)[0]
        above = torch.ones(n, n, dtype=torch.bool, device=m.device).triu(1)
        dropped = m if m.dtype == torch.bool else (m < -1e3)
        # A bool mask may mean "keep" (SDPA) or "drop" (masked_fill): accept both.
        return bool(torch.equal(dropped, above)) or (
            m.dtype == torch.bool and bool(torch.equal(~m, above)))
