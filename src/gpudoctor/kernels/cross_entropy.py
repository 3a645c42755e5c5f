"""``linear_cross_entropy``: the LM head and the cross-entropy loss, chunked over tokens so the
[tokens, vocab] logits never exist whole.

The cure for the VRAM wall (activation memory that outgrows the card) at its widest point: eager
``F.cross_entropy(h @ W.T, t)`` keeps the logits (and HF's ``.float()`` copy of them) for backward,
for 8192 tokens of Qwen2's 151936-entry vocabulary 2.5 GB in bf16 plus 5.0 GB in fp32. Here, for
each chunk of rows:

1. ``logits = h_chunk @ W.T (+ b)`` in the input dtype (cuBLAS, through ``torch.mm``);
2. one Triton program per row reads the row twice in fp32: an online max / logsumexp, then the
   loss and, written over the logits in place, ``d loss / d logits``;
3. ``grad_h[chunk] = dlogits @ W`` and ``grad_W += dlogits.T @ h_chunk`` (``grad_b += sum``)
   right away, so the chunk's buffer is reused by the next chunk.

The gradients are thus made in the forward; the autograd function saves only them (no logits, no
softmax) and its backward multiplies them by ``grad_output``.

Per non-ignored row, with ``x`` the logits row, ``lse = logsumexp(x)``, ``eps = label_smoothing``,
``V`` the vocabulary size and ``z = z_loss``:

    loss = (1 - eps) (lse - x[t]) + eps (lse - mean(x)) + z lse^2     (PyTorch's label smoothing)
    dloss/dx_j = softmax(x)_j (1 + 2 z lse) - (1 - eps) [j == t] - eps / V

Ignored rows (``target == ignore_index``) have loss 0 and gradient 0. ``reduction="mean"``
divides by the number of non-ignored rows, counted once up front (0 of them gives loss 0, not
NaN as ``F.cross_entropy`` does). The mean is per call: to divide by a count over several
micro-batches (HF's ``num_items_in_batch``), call with ``reduction="sum"`` and divide the result.

Memory, time and gradients against Hugging Face's ``F.cross_entropy((h @ W.T).float(), t)`` on an
H100: benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source: kernel constants".
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

from gpudoctor.errors import InputError
from gpudoctor.kernels._common import Launcher, check_same, check_tensor, define_op, tl, use_triton
from gpudoctor.kernels._common import jit as _jit

# The logits chunk [rows, vocab] in the input dtype stays under this many bytes: 512 MiB, for bf16
# and V = 151936 (Qwen2) 1664 rows, V = 128256 (Llama 3) 2048 rows (half as many in fp32). cuBLAS
# runs an M >= 1024 bf16 GEMM near its peak, so the chunking costs the matmuls little.
CHUNK_BYTES = 1 << 29
# Chunks of at least this many rows are rounded down to a multiple of it (whole GEMM tiles).
CHUNK_ALIGN = 128
# Columns a program handles per step of its loop over the vocabulary (fp32: 16 values a thread
# at 8 warps). Not yet tuned on the H100.
BLOCK_V = 4096

REDUCTIONS = ("mean", "sum", "none")


# -- kernel
# ------------------------------------------------------------------------------------------


@_jit
def _ce_kernel(LOGITS, stride_row, TARGET, LOSS, ROW_SCALE, SCALE, n_cols, ignore_index,
               smoothing, z_loss, HAS_ROW_SCALE: tl.constexpr, WRITE_GRAD: tl.constexpr,
               HAS_SMOOTHING: tl.constexpr, BLOCK: tl.constexpr):
    # one program per row: reads the row twice (statistics, then gradient), writes it once in place
    # 64-bit: row * stride passes 2^31 for rows > 14133 at V = 151936
    row = tl.program_id(0).to(tl.int64)
    x_row = LOGITS + row * stride_row
    target = tl.load(TARGET + row).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    if target == ignore_index:
        tl.store(LOSS + row, 0.0)
        if WRITE_GRAD:
            zero = tl.zeros([BLOCK], dtype=LOGITS.dtype.element_ty)
            for start in range(0, n_cols, BLOCK):
                cols = start + offs
                tl.store(x_row + cols, zero, mask=cols < n_cols)
    else:
        m = float("-inf")  # running max
        d = 0.0  # running sum of exp(x - m)
        sum_x = 0.0
        for start in range(0, n_cols, BLOCK):
            cols = start + offs
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a block of -inf logits: no NaN
            d = d * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)
            m = m_new
            if HAS_SMOOTHING:
                sum_x += tl.sum(tl.where(mask, x, 0.0), axis=0)
        lse = m + tl.log(d)
        x_t = tl.load(x_row + target).to(tl.float32)
        loss = lse - (1.0 - smoothing) * x_t + z_loss * lse * lse
        if HAS_SMOOTHING:
            loss -= smoothing * sum_x / n_cols
        tl.store(LOSS + row, loss)
        if WRITE_GRAD:
            # 1 / valid rows for mean: on the GPU, no host sync to learn it
            s = tl.load(SCALE).to(tl.float32)
            if HAS_ROW_SCALE:
                s = s * tl.load(ROW_SCALE + row).to(tl.float32)
            coef = s * (1.0 + 2.0 * z_loss * lse)
            uniform = s * smoothing / n_cols
            hit = s * (1.0 - smoothing)
            for start in range(0, n_cols, BLOCK):
                cols = start + offs
                mask = cols < n_cols
                x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
                g = tl.exp(x - lse) * coef
                if HAS_SMOOTHING:
                    g -= uniform
                g = tl.where(cols == target, g - hit, g)
                tl.store(x_row + cols, g.to(LOGITS.dtype.element_ty), mask=mask)


# -- one chunk of rows: Triton or native
# -------------------------------------------------------------


_launch_ce = Launcher(_ce_kernel)


class _Opts(NamedTuple):
    ignore_index: int
    reduction: str
    label_smoothing: float
    z_loss: float
    chunk: int


def _rows_triton(logits: torch.Tensor, target: torch.Tensor, loss: torch.Tensor,
                 scale: torch.Tensor,
                 row_scale: torch.Tensor | None, write_grad: bool, o: _Opts) -> None:
    n_rows, vocab = logits.shape
    block = min(BLOCK_V, max(16, 1 << (vocab - 1).bit_length()))
    _launch_ce.launch((n_rows,),
                      (logits, logits.stride(0), target, loss,
                       loss if row_scale is None else row_scale,
                                  scale, vocab, o.ignore_index, o.label_smoothing, o.z_loss),
                      (row_scale is not None, write_grad, o.label_smoothing > 0, block),
                      8 if block >= 2048 else 4)


def _rows_native(logits: torch.Tensor, target: torch.Tensor, loss: torch.Tensor,
                 scale: torch.Tensor,
                 row_scale: torch.Tensor | None, write_grad: bool, o: _Opts) -> None:
    """The kernel's math in PyTorch ops, fp32 (fp64 for fp64), on one chunk; same in-place
    contract."""
    x = logits.to(loss.dtype)  # [rows, V]
    valid = target != o.ignore_index
    t = torch.where(valid, target, 0).long()[:, None]
    lse = torch.logsumexp(x, dim=1)
    row_loss = lse - (1.0 - o.label_smoothing) * x.gather(1, t)[:, 0] + o.z_loss * lse * lse
    if o.label_smoothing > 0:
        row_loss = row_loss - o.label_smoothing * x.mean(1)
    loss.copy_(torch.where(valid, row_loss, 0.0))
    if not write_grad:
        return
    s = valid.to(loss.dtype) * scale
    if row_scale is not None:
        s = s * row_scale.to(loss.dtype)
    g = (x - lse[:, None]).exp_().mul_((s * (1.0 + 2.0 * o.z_loss * lse))[:, None])
    if o.label_smoothing > 0:
        g.sub_((s * (o.label_smoothing / x.shape[1]))[:, None])
    g.scatter_add_(1, t, (-(1.0 - o.label_smoothing) * s)[:, None])
    logits.copy_(g)


def _run_chunks(h2: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                t1: torch.Tensor, o: _Opts, scale: torch.Tensor, row_scale: torch.Tensor | None,
                needs: tuple[bool, bool, bool]):
    """Loop over row chunks: per-row loss [N] and, for each ``needs`` (hidden, weight, bias), its
    gradient. ``scale``: [1] in the loss dtype, every row's gradient factor (1 / valid rows for
    mean)."""
    n_rows, _ = h2.shape
    vocab = weight.shape[0]
    rows_fn = _rows_triton if use_triton(h2) else _rows_native
    loss_dtype = torch.promote_types(h2.dtype, torch.float32)
    loss = torch.empty(n_rows, dtype=loss_dtype, device=h2.device)  # [N]
    g_h = torch.empty(h2.shape, dtype=h2.dtype, device=h2.device) if needs[0] else None  # [N, H]
    # [V, H], accumulated in the input dtype (cuBLAS adds in fp32 and rounds once per chunk)
    g_w = torch.zeros(weight.shape, dtype=weight.dtype, device=weight.device) if needs[1] else None
    g_b = torch.zeros(vocab, dtype=loss_dtype, device=h2.device) if needs[2] else None  # [V], fp32
    write_grad = any(needs)
    # [chunk, V], reused
    buf = torch.empty((min(o.chunk, n_rows), vocab), dtype=h2.dtype, device=h2.device)
    w_t = weight.t()
    for start in range(0, n_rows, o.chunk):
        end = min(n_rows, start + o.chunk)
        h_c = h2[start:end]
        logits = buf[: end - start]
        if bias is None:
            torch.mm(h_c, w_t, out=logits)
        else:
            torch.addmm(bias, h_c, w_t, out=logits)
        rows_fn(logits, t1[start:end], loss[start:end], scale,
                None if row_scale is None else row_scale[start:end], write_grad, o)
        if g_h is not None:  # logits now holds dloss/dlogits
            torch.mm(logits, weight, out=g_h[start:end])
        if g_w is not None:
            g_w.addmm_(logits.t(), h_c)
        if g_b is not None:
            g_b += logits.sum(0, dtype=loss_dtype)
    return loss, g_h, g_w, g_b


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                target: torch.Tensor, o: _Opts, scale: torch.Tensor) -> torch.Tensor:
        h2, t1 = _flat(hidden, target)
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1],
                 bias is not None and ctx.needs_input_grad[2])
        ctx.o, ctx.hidden_shape = o, hidden.shape
        # grad_output is per row: the gradients wait for it (a second pass)
        if o.reduction == "none":
            loss, _, _, _ = _run_chunks(h2, weight, bias, t1, o, torch.ones_like(scale), None,
                                        (False, False, False))
            ctx.needs = needs
            ctx.save_for_backward(h2, weight, bias, t1)  # inputs only
            return loss.view(target.shape)
        loss, g_h, g_w, g_b = _run_chunks(h2, weight, bias, t1, o, scale, None, needs)
        # the gradients only
        ctx.save_for_backward(g_h, g_w, None if g_b is None else g_b.to(bias.dtype))
        return loss.sum() * scale[0]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: torch.Tensor):
        o = ctx.o
        if o.reduction == "none":
            h2, weight, bias, t1 = ctx.saved_tensors
            # contiguous: the gradient of loss.sum() arrives expanded (stride 0)
            row_scale = grad_loss.reshape(-1).to(torch.promote_types(h2.dtype,
                                                                     torch.float32)).contiguous()
            _, g_h, g_w, g_b = _run_chunks(h2, weight, bias, t1, o, torch.ones_like(row_scale[:1]),
                                           row_scale, ctx.needs)
            g_b = None if g_b is None else g_b.to(bias.dtype)
        else:
            if getattr(ctx, "used", False):
                raise InputError("linear_cross_entropy's backward ran twice on one forward "
                                 "(retain_graph): its gradients are computed in the forward and "
                                 "handed out once; run the forward again")
            ctx.used = True
            g_h, g_w, g_b = ctx.saved_tensors
            # scaled in place (the saved gradients are ours, and a copy of the [V, H] one would
            # raise the peak), always: testing grad_loss == 1 first would sync the host with the GPU
            # once per step
            g_h, g_w, g_b = (None if g is None else g.mul_(grad_loss.to(g.dtype))
                             for g in (g_h, g_w, g_b))
        g_h = None if g_h is None else g_h.view(ctx.hidden_shape)
        return g_h, g_w, g_b, None, None, None


# -- the gpudoctor::linear_cross_entropy custom op (what torch.compile sees)
# -------------------------------
#
# Opaque (``custom_op``) on every torch: the body is cuBLAS matmuls writing into one reused logits
# buffer and a kernel rewriting it in place, which a functionalized trace would turn into copies of
# the buffer per chunk.


def _op_forward(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                target: torch.Tensor, scale: torch.Tensor, row_scale: torch.Tensor | None,
                ignore_index: int, reduction: str,
                label_smoothing: float, z_loss: float, chunk: int, need_hidden: bool,
                need_weight: bool, need_bias: bool) -> tuple[torch.Tensor, torch.Tensor,
                                                             torch.Tensor, torch.Tensor]:
    """hidden [N, H], target [N] -> (loss, grad hidden, grad weight, grad bias); a gradient not
    asked for is an empty [0]. The loss is 0-d for "mean" / "sum", [N] for "none" (whose gradients
    come from a second call with ``row_scale``, the per-row grad_output)."""
    o = _Opts(ignore_index, reduction, label_smoothing, z_loss, chunk)
    needs = (need_hidden, need_weight, bias is not None and need_bias)
    if row_scale is not None:
        loss, g_h, g_w, g_b = _run_chunks(hidden, weight, bias, target, o,
                                          torch.ones_like(row_scale[:1]), row_scale, needs)
    elif reduction == "none":
        loss, g_h, g_w, g_b = _run_chunks(hidden, weight, bias, target, o,
                                          torch.ones_like(scale), None, (False, False, False))
    else:
        loss, g_h, g_w, g_b = _run_chunks(hidden, weight, bias, target, o, scale, None, needs)
        loss = loss.sum() * scale[0]
    return (loss, hidden.new_empty(0) if g_h is None else g_h,
            weight.new_empty(0) if g_w is None else g_w,
            # distinct
            (hidden if bias is None else bias).new_empty(0) if g_b is None else g_b.to(bias.dtype))
    # empties (returns never alias one another), in the dtypes the fake implementation gives


def _op_forward_fake(hidden, weight, bias, target, scale, row_scale, ignore_index, reduction,
                     label_smoothing, z_loss, chunk, need_hidden, need_weight, need_bias):
    loss_dtype = torch.promote_types(hidden.dtype, torch.float32)
    per_row = row_scale is not None or reduction == "none"
    grads = row_scale is not None or reduction != "none"
    return (hidden.new_empty(target.shape if per_row else (), dtype=loss_dtype),
            hidden.new_empty(hidden.shape if grads and need_hidden else (0,)),
            weight.new_empty(weight.shape if grads and need_weight else (0,)),
            hidden.new_empty((weight.shape[0],) if grads and need_bias
                             and bias is not None else (0,),
                             dtype=hidden.dtype if bias is None else bias.dtype))


def _setup(ctx, inputs, output) -> None:
    hidden, weight, bias, target, scale, _, *options = inputs
    ctx.options = options  # ignore_index, reduction, label_smoothing, z_loss, chunk, needs
    ctx.mark_non_differentiable(*output[1:])
    ctx.set_materialize_grads(False)  # no zeros of [V, H] for the gradient outputs nobody differentiates
    if options[1] == "none":  # grad_output is per row: the gradients wait for it (a second pass)
        ctx.save_for_backward(hidden, weight, bias, target, scale)  # inputs only
    else:
        ctx.save_for_backward(*output[1:])  # the gradients only, as the eager path


def _op_grad(ctx, grad_loss: torch.Tensor | None, *_unused):
    if grad_loss is None:
        return (None,) * 14
    ignore_index, reduction, label_smoothing, z_loss, chunk = ctx.options[:5]
    needs = ctx.needs_input_grad
    if reduction == "none":
        hidden, weight, bias, target, scale = ctx.saved_tensors
        row_scale = grad_loss.reshape(-1).to(torch.promote_types(hidden.dtype,
                                                                 torch.float32)).contiguous()
        _, g_h, g_w, g_b = _OP(hidden, weight, bias, target, scale, row_scale,
                               ignore_index, reduction, label_smoothing, z_loss, chunk, needs[0],
                               needs[1], needs[2])
    else:
        # out of place: traced
        g_h, g_w, g_b = (g * grad_loss.to(g.dtype) for g in ctx.saved_tensors)
    return ((g_h if needs[0] else None), (g_w if needs[1] else None), (g_b if needs[2] else None)) + (None,) * 11


_OP = define_op("linear_cross_entropy", _op_forward, _op_forward_fake, reference=_op_forward,
                triton=False)
if _OP is not None:
    _OP.register_autograd(_op_grad, setup_context=_setup)


# -- checks and entry
# ----------------------------------------------------------------------------------


def _flat(hidden: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [..., H] -> [N, H] (a view when possible); target [...] -> [N], contiguous for the
    kernel."""
    return hidden.reshape(-1, hidden.shape[-1]), target.reshape(-1).contiguous()


def chunk_rows(n_rows: int, vocab: int, element_size: int) -> int:
    """Rows per chunk: the most whose [rows, vocab] logits fit in CHUNK_BYTES (at least 1, at most
    n_rows), rounded down to a multiple of CHUNK_ALIGN when at least that many."""
    rows = max(1, CHUNK_BYTES // max(1, vocab * element_size))
    if rows >= n_rows:
        return max(1, n_rows)
    if rows >= CHUNK_ALIGN:
        rows -= rows % CHUNK_ALIGN
    return rows


def _check(hidden: object, weight: object, target: object, bias: object, reduction: object,
           label_smoothing: object, z_loss: object, ignore_index: object,
           chunk_size: object) -> None:
    check_tensor("hidden", hidden, min_dims=1)
    check_tensor("weight", weight, dims=2)
    if bias is not None:
        check_tensor("bias", bias, dims=1)
    if not isinstance(target, torch.Tensor):
        raise InputError(
            f"target must be a torch.Tensor of class indices, got {type(target).__name__}")
    if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
        raise InputError("target must be an integer tensor of class indices (int64 or int32), got "
                         f"{target.dtype}; probabilities as targets are not supported")
    check_same("hidden", hidden, weight=weight, bias=bias, target=target)
    h = hidden.shape[-1]
    if weight.shape[1] != h:
        raise InputError(f"weight has shape {tuple(weight.shape)} but hidden's last dimension "
                         f"is {h}; give the LM head weight as [vocab, {h}]")
    if bias is not None and bias.shape[0] != weight.shape[0]:
        raise InputError(f"bias has {bias.shape[0]} elements but weight has {weight.shape[0]} rows "
                         f"(the vocabulary); give a bias of shape ({weight.shape[0]},)")
    if target.shape != hidden.shape[:-1]:
        raise InputError(f"target has shape {tuple(target.shape)} but hidden has shape "
                         f"{tuple(hidden.shape)}; give one class index per row of hidden: shape "
                         f"{tuple(hidden.shape[:-1])}")
    if reduction not in REDUCTIONS:
        raise InputError(
            f"reduction must be one of {', '.join(map(repr, REDUCTIONS))}, got {reduction!r}")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) \
            or not 0.0 <= label_smoothing <= 1.0:
        raise InputError(f"label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
    if isinstance(z_loss, bool) or not isinstance(z_loss, (int, float)) or not 0.0 <= z_loss < float("inf"):
        raise InputError(
            f"z_loss must be a finite number >= 0 (the weight of lse^2), got {z_loss!r}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise InputError(f"ignore_index must be an int, got {ignore_index!r}")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                   or chunk_size < 1):
        raise InputError(
            f"chunk_size must be an int >= 1 (rows per chunk) or None, got {chunk_size!r}")


def _autocast(hidden: object, weight: object, bias: object) -> tuple:
    """Under torch.autocast, the LM head runs in the autocast dtype, as ``F.linear`` would there
    (an fp32 master weight is cast, and its gradient flows back through the cast)."""
    if not isinstance(hidden, torch.Tensor) or not torch.is_autocast_enabled(hidden.device.type):
        return hidden, weight, bias
    dtype = torch.get_autocast_dtype(hidden.device.type)
    cast = [t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point()
            and t.dtype != torch.float64
            else t for t in (hidden, weight, bias)]  # autocast leaves fp64 alone
    return cast[0], cast[1], cast[2]


def _count_valid(t1: torch.Tensor, vocab: int, ignore_index: int) -> torch.Tensor:
    """Non-ignored rows, a 0-d tensor on ``t1``'s device. A non-ignored target outside [0, vocab) is
    a one-line InputError on the CPU; on a GPU a device-side assert, as ``F.cross_entropy`` does
    there: checking on the host would stop the CPU running ahead of the GPU once per call (the
    doctor's ``host-sync`` trap)."""
    valid = t1 != ignore_index
    bad = valid & ((t1 < 0) | (t1 >= vocab))
    # compiled: no data-dependent break
    if t1.device.type == "cpu" and not torch.compiler.is_compiling():
        n_bad = int(bad.sum())
        if n_bad:
            value = int(t1[bad][0])
            raise InputError(f"target holds class index {value}, outside [0, {vocab}) (weight's "
                             f"rows) and not ignore_index={ignore_index}; {n_bad} such entries")
    else:
        torch._assert_async(~bad.any(),
                            f"linear_cross_entropy: a target outside [0, {vocab}) that is not "
                                        f"ignore_index={ignore_index}")
    return valid.sum()


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                         bias: torch.Tensor | None = None, ignore_index: int = -100,
                         reduction: str = "mean",
                         label_smoothing: float = 0.0, z_loss: float = 0.0, *,
                         chunk_size: int | None = None) -> torch.Tensor:
    """``F.cross_entropy(hidden @ weight.T + bias, target, ...) + z_loss * lse^2`` without the
    logits.

    hidden [..., H] (fp32/bf16/fp16; fp64 takes the native path), weight [V, H], bias [V] or None,
    target [...] integer class indices (``ignore_index`` rows count for nothing). ``reduction``:
    ``"mean"`` over non-ignored rows (0 when all are ignored), ``"sum"``, or ``"none"`` (per-row
    losses of target's shape; its backward runs the chunked matmuls a second time, since the
    weight gradient needs the per-row grad_output). The loss is fp32 (fp64 for fp64 inputs).

    ``chunk_size`` rows per chunk; default ``chunk_rows``: the logits chunk stays under CHUNK_BYTES.
    No host sync: the count of non-ignored rows stays on the device (targets out of range: an
    InputError for CPU tensors, a device-side assert on a GPU, as ``F.cross_entropy``). Under
    ``torch.autocast`` the matmuls run in the autocast dtype, as ``F.linear`` would. Triton on CUDA;
    the same chunked loop in PyTorch ops for CPU tensors and fp64.
    """
    hidden, weight, bias = _autocast(hidden, weight, bias)
    _check(hidden, weight, target, bias, reduction, label_smoothing, z_loss,
           ignore_index, chunk_size)
    n_rows = target.numel()
    vocab = weight.shape[0]
    n_valid = _count_valid(target.reshape(-1), vocab, ignore_index)
    chunk = chunk_size or chunk_rows(n_rows, vocab, hidden.element_size())
    o = _Opts(ignore_index, reduction, float(label_smoothing), float(z_loss), chunk)
    loss_dtype = torch.promote_types(hidden.dtype, torch.float32)
    scale = (1.0 / n_valid.clamp(min=1).to(loss_dtype) if reduction == "mean"
             else torch.ones((), dtype=loss_dtype, device=hidden.device)).reshape(1)  # [1]
    if n_rows == 0:  # F.cross_entropy's empty cases, with mean -> 0 like the all-ignored case
        zero = (hidden.sum() + weight.sum()).to(loss_dtype) * 0
        return zero.expand(target.shape) if reduction == "none" else zero
    grads = torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                            for t in (hidden, weight, bias))
    with torch.autocast(hidden.device.type, enabled=False):  # inputs already in the matmul dtype
        if _OP is not None and torch.compiler.is_compiling():  # one node the compiler traces, no break
            h2, t1 = _flat(hidden, target)
            needs = [grads and t is not None and t.requires_grad for t in (hidden, weight, bias)]
            loss = _OP(h2, weight, bias, t1, scale, None, ignore_index, reduction,
                       o.label_smoothing, o.z_loss, chunk, *needs)[0]
            return loss.view(target.shape) if reduction == "none" else loss
        if grads:
            return _LinearCrossEntropy.apply(hidden, weight, bias, target, o, scale)
        h2, t1 = _flat(hidden, target)
        loss, _, _, _ = _run_chunks(h2, weight, bias, t1, o, scale, None, (False, False, False))
        return loss.view(target.shape) if reduction == "none" else loss.sum() * scale[0]
