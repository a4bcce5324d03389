"""NF4 layer checks (needs torch; CI has none, so these run by hand or on the GPU machine):
    python3 python/tests/test_nf4.py        (or pytest python/tests)
The layer must compute exactly what dequantise-then-matmul computes, forward and backward, keep
bitsandbytes' storage layout, and allocate no more than the dequantised weight while it runs."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

from trainfit_runner import nf4  # noqa: E402


def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def test_storage_layout_is_bitsandbytes():
    w = torch.randn(384, 1024)
    packed, st = nf4.quantize_nf4(w)
    n = w.numel()
    assert packed.dtype == torch.uint8 and packed.numel() == n // 2
    assert st.absmax_q.dtype == torch.uint8 and st.absmax_q.numel() == n // 64
    assert st.absmax_scale.dtype == torch.float32 and st.absmax_scale.numel() == -(-n // 64 // 256)
    assert st.nbytes() == n // 64 + 4 * (-(-n // 64 // 256)) + 4  # n/64 * (1 + 4/256) + the offset


def test_round_trip_error_is_nf4s():
    torch.manual_seed(0)
    w = torch.randn(512, 512)
    packed, st = nf4.quantize_nf4(w, compute_dtype=torch.float32)
    rel = ((nf4.dequantize_nf4(packed, st) - w).norm() / w.norm()).item()
    assert 0.05 < rel < 0.12, rel  # 4-bit NormalFloat on Gaussian weights: about 9%
    codes = torch.cat([packed >> 4, packed & 15]).unique()
    assert codes.numel() == 16  # every code is used


def test_layer_matches_dequantise_then_matmul():
    for dev in devices():
        dtype = torch.bfloat16 if dev == "cuda" else torch.float32
        torch.manual_seed(1)
        lin = torch.nn.Linear(256, 640, bias=True).to(dev)
        q = nf4.NF4Linear.from_linear(lin, compute_dtype=dtype)
        x = torch.randn(2, 9, 256, device=dev, dtype=dtype, requires_grad=True)
        y = q(x)
        w = nf4.dequantize_nf4(q.weight, q.quant_state, dtype)
        x2 = x.detach().clone().requires_grad_(True)
        ref = torch.nn.functional.linear(x2, w, q.bias)
        assert torch.equal(y, ref), (dev, (y - ref).abs().max())
        g = torch.randn_like(y)
        y.backward(g)
        ref.backward(g)
        assert torch.allclose(x.grad.float(), x2.grad.float(), rtol=1e-2, atol=1e-2), dev
        print("layer == dequantise-then-matmul on", dev, "max |dgrad diff|", (x.grad - x2.grad).abs().max().item())


def test_autograd_saves_only_the_packed_weight():
    if not torch.cuda.is_available():
        return
    lin = torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
    q = nf4.NF4Linear.from_linear(lin)
    del lin
    x = torch.randn(1, 16, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = q(x)
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - base
    peak = torch.cuda.max_memory_allocated() - base
    wbytes = 4096 * 4096 * 2
    assert kept == y.numel() * 2 or kept <= y.numel() * 2 + 512, kept  # the output only: no weight kept
    assert peak <= wbytes + (40 << 20), (peak, wbytes)  # the dequantised weight + bounded indices
    print("forward keeps %d B (output), peak transient %.1f MiB (weight %.1f MiB)" % (kept, peak / 2**20, wbytes / 2**20))


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
            print("ok", name)
