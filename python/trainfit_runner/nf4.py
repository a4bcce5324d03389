"""4-bit NormalFloat (NF4) weights stored and used as bitsandbytes stores and uses them, in plain torch.

Used when bitsandbytes is not installed, so that QLoRA memory is measured honestly anyway:

* storage: two 4-bit codes per byte (uint8, the first element in the high nibble), one absmax per
  block of 64 weights; with double quantisation (bitsandbytes' default in QLoRA) the absmax values
  are stored as uint8 with one fp32 scale per 256 blocks and one fp32 offset, so the constants take
  ``n / 64 * (1 + 4 / 256)`` bytes, as in bitsandbytes.  (bitsandbytes quantises the absmax with its
  8-bit dynamic map; this uses a linear 8-bit map: the same bytes, slightly different rounding.)
* compute: like bitsandbytes' ``MatMul4Bit``, the forward dequantises the whole weight to the compute
  dtype, multiplies, and frees it; autograd keeps only the packed weight; the backward dequantises
  it again for the input gradient.  The dequantised weight is the one transient a layer adds.
* dequantisation writes straight into the output tensor through a 256-entry table of code pairs, a
  chunk of bytes at a time, so it allocates the output plus at most 32 MiB of indices, never an
  int64 copy of the whole weight.
"""
import torch
import torch.nn as nn

BLOCK = 64          # weights per absmax (bitsandbytes' blocksize for 4-bit)
BLOCK2 = 256        # absmax values per fp32 scale (double quantisation)
CHUNK = 8 << 20     # packed bytes dequantised per index_select (8 Mi -> 32 MiB of int32 indices)

# bitsandbytes' NF4 code (quantiles of N(0, 1), normalised to [-1, 1], with an exact 0).
NF4_CODE = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
            -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
            0.24611230194568634, 0.33791524171447754, 0.44070982933044434, 0.5626170039176941,
            0.7229568362236023, 1.0]

_tables = {}


def _pair_table(device, dtype):
    """[256, 2]: the two NF4 values a byte holds (high nibble first), one table per device and dtype."""
    key = (str(device), dtype)
    t = _tables.get(key)
    if t is None:
        code = torch.tensor(NF4_CODE, dtype=torch.float32, device=device)
        b = torch.arange(256, device=device)
        t = torch.stack([code[b >> 4], code[b & 15]], dim=1).to(dtype).contiguous()
        _tables[key] = t
    return t


class QuantState:
    """What bitsandbytes' QuantState holds for a double-quantised NF4 weight."""

    def __init__(self, shape, absmax_q, absmax_scale, absmax_offset, dtype, double_quant):
        self.shape = shape                  # (out, in) of the original weight
        self.absmax_q = absmax_q            # uint8 [blocks] (double quant) or fp32 [blocks]
        self.absmax_scale = absmax_scale    # fp32 [ceil(blocks / 256)] or None
        self.absmax_offset = absmax_offset  # fp32 scalar tensor or None
        self.dtype = dtype                  # compute dtype
        self.double_quant = double_quant

    def absmax(self):
        if not self.double_quant:
            return self.absmax_q
        n = self.absmax_q.numel()
        q = self.absmax_q.view(-1).to(torch.float32) - 127.0
        pad = (-n) % BLOCK2
        if pad:
            q = torch.nn.functional.pad(q, (0, pad))
        a = (q.view(-1, BLOCK2) / 127.0 * self.absmax_scale.view(-1, 1)).view(-1)[:n]
        return a + self.absmax_offset

    def nbytes(self):
        t = [self.absmax_q, self.absmax_scale, self.absmax_offset]
        return sum(x.numel() * x.element_size() for x in t if x is not None)


@torch.no_grad()
def quantize_nf4(weight, double_quant=True, compute_dtype=None):
    """Returns (packed uint8 [n / 2], QuantState).  The weight's element count must divide by 64."""
    w = weight.detach()
    n = w.numel()
    if n % BLOCK:
        raise ValueError("NF4 needs a multiple of %d weights, got %d" % (BLOCK, n))
    code = torch.tensor(NF4_CODE, dtype=torch.float32, device=w.device)
    mids = (code[1:] + code[:-1]) / 2
    packed = torch.empty(n // 2, dtype=torch.uint8, device=w.device)
    absmax = torch.empty(n // BLOCK, dtype=torch.float32, device=w.device)
    flat = w.reshape(-1)
    step = CHUNK * 2  # weights per chunk, a multiple of 64: keeps the fp32 temporaries small
    for s in range(0, n, step):
        blk = flat[s:s + step].to(torch.float32).view(-1, BLOCK)
        am = blk.abs().amax(dim=1)
        absmax[s // BLOCK:s // BLOCK + blk.shape[0]] = am
        idx = torch.bucketize((blk / am.clamp_min(1e-12).unsqueeze(1)).view(-1), mids).to(torch.uint8)
        packed[s // 2:s // 2 + idx.numel() // 2] = (idx[0::2] << 4) | idx[1::2]
        del blk, idx
    dtype = compute_dtype or (w.dtype if w.dtype.is_floating_point else torch.bfloat16)
    if not double_quant:
        return packed, QuantState(tuple(w.shape), absmax, None, None, dtype, False)
    offset = absmax.mean()
    centred = absmax - offset
    nb = centred.numel()
    pad = (-nb) % BLOCK2
    c = torch.nn.functional.pad(centred, (0, pad)) if pad else centred
    scale = c.view(-1, BLOCK2).abs().amax(dim=1).clamp_min(1e-12)
    q = torch.round(c.view(-1, BLOCK2) / scale.view(-1, 1) * 127.0).clamp(-127, 127) + 127.0
    q = q.view(-1)[:nb].to(torch.uint8).contiguous()
    return packed, QuantState(tuple(w.shape), q, scale.contiguous(), offset.reshape(()), dtype, True)


def dequantize_nf4(packed, state, dtype=None):
    """The weight in `dtype` (default: the compute dtype), shape state.shape.  Allocates the output and
    at most CHUNK int32 indices."""
    dtype = dtype or state.dtype
    n2 = packed.numel()
    table = _pair_table(packed.device, dtype)
    out = torch.empty(n2 * 2, dtype=dtype, device=packed.device)
    pairs = out.view(-1, 2)
    for s in range(0, n2, CHUNK):
        e = min(s + CHUNK, n2)
        torch.index_select(table, 0, packed[s:e].to(torch.int32), out=pairs[s:e])
    out.view(-1, BLOCK).mul_(state.absmax().to(dtype).view(-1, 1))
    return out.view(state.shape)


class MatMulNF4(torch.autograd.Function):
    """y = x W^T + b with W dequantised on the fly; autograd saves only the packed W (a parameter)."""

    @staticmethod
    def forward(ctx, x, packed, state, bias):
        w = dequantize_nf4(packed, state, x.dtype)
        y = torch.nn.functional.linear(x, w, bias)
        del w
        ctx.state = state
        ctx.save_for_backward(packed)
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y

    @staticmethod
    def backward(ctx, grad_out):
        (packed,) = ctx.saved_tensors
        grad_x = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.matmul(grad_out, dequantize_nf4(packed, ctx.state, grad_out.dtype))
        if ctx.needs_input_grad[3]:
            grad_bias = grad_out.reshape(-1, grad_out.shape[-1]).sum(0).to(ctx.bias_dtype)
        return grad_x, None, None, grad_bias


class NF4Linear(nn.Linear):
    """A frozen 4-bit linear layer.  Subclasses nn.Linear (without its weight) so that PEFT wraps it
    with its ordinary LoRA layer, as it wraps bitsandbytes' Linear4bit."""

    def __init__(self, in_features, out_features, packed, state, bias=None):
        nn.Module.__init__(self)
        self.in_features = in_features
        self.out_features = out_features
        # Parameters (frozen) so that .to(), state_dict and PEFT's device logic see them; uint8, so
        # PEFT leaves its adapters' dtype alone.
        self.weight = nn.Parameter(packed, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self.quant_state = state
        for name in ("absmax_q", "absmax_scale", "absmax_offset"):
            t = getattr(state, name)
            if t is not None:
                self.register_buffer(name, t, persistent=False)

    @classmethod
    def from_linear(cls, linear, double_quant=True, compute_dtype=torch.bfloat16):
        packed, state = quantize_nf4(linear.weight, double_quant=double_quant, compute_dtype=compute_dtype)
        bias = None if linear.bias is None else linear.bias.detach().to(compute_dtype)
        return cls(linear.in_features, linear.out_features, packed, state, bias)

    def forward(self, x):
        dtype = x.dtype
        if x.dtype != self.quant_state.dtype:
            x = x.to(self.quant_state.dtype)   # as Linear4bit casts to its compute dtype
        # Linear4bit also computes with a copy of the bias in the compute dtype: after PEFT's k-bit
        # preparation the bias itself is fp32.
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return MatMulNF4.apply(x, self.weight, self.quant_state, bias).to(dtype)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, nf4, double_quant=%s" % (
            self.in_features, self.out_features, self.quant_state.double_quant)


def quantize_model_(model, double_quant=True, compute_dtype=torch.bfloat16, skip=("lm_head",)):
    """Replaces every nn.Linear except `skip` with an NF4Linear, one at a time (each full-precision
    weight is freed as soon as its layer is quantised).  Returns the number of layers replaced."""
    count = 0
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is not nn.Linear or child_name in skip:
                continue
            setattr(parent, child_name, NF4Linear.from_linear(child, double_quant, compute_dtype))
            child.weight = None
            del child
            count += 1
    return count
