"""A host-bound job for `trainfit watch`: LoRA on a model shaped as Qwen2.5-0.5B (24 layers, hidden
896, 14 query and 2 key/value heads, MLP 4864, vocabulary 151,936; random weights, no download), one
sequence of 128 tokens a step, the tokens made on the GPU: no data loader at all. Each step launches
a few thousand small kernels; the Python thread cannot launch them as fast as the GPU runs them, so
the GPU idles most of the time while one host thread runs flat out (the planner's launch overhead).
The probe reports step times but no data waits (there is no loader), so watch decides from /proc."""
import argparse
import math
import time

import torch
import torch.nn.functional as F

from _jobs import Probe

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=40)
ap.add_argument("--warmup", type=float, default=8)
ap.add_argument("--seq", type=int, default=128)
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--rank", type=int, default=16)
args = ap.parse_args()

HIDDEN, LAYERS, HEADS, KV_HEADS, MLP, VOCAB = 896, 24, 14, 2, 4864, 151936
HEAD = HIDDEN // HEADS


class LoraLinear(torch.nn.Module):
    """A frozen bf16 projection with a trainable fp32 low-rank update (as PEFT's LoRA layer)."""

    def __init__(self, n_in, n_out, rank, bias=False):
        super().__init__()
        self.base = torch.nn.Linear(n_in, n_out, bias=bias, dtype=torch.bfloat16)
        self.base.requires_grad_(False)
        self.a = torch.nn.Parameter(torch.randn(rank, n_in) / math.sqrt(n_in))
        self.b = torch.nn.Parameter(torch.zeros(n_out, rank))
        self.scale = 2.0  # alpha 32 / rank 16

    def forward(self, x):
        return self.base(x) + (F.linear(F.linear(x.float(), self.a), self.b) * self.scale).to(x.dtype)


class RMSNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n, dtype=torch.bfloat16), requires_grad=False)

    def forward(self, x):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(v + 1e-6)).to(x.dtype) * self.weight


def rotate(x, cos, sin):
    a, b = x[..., : HEAD // 2], x[..., HEAD // 2:]
    return x * cos + torch.cat((-b, a), dim=-1) * sin


class Block(torch.nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(HIDDEN), RMSNorm(HIDDEN)
        self.q = LoraLinear(HIDDEN, HEADS * HEAD, rank, bias=True)
        self.k = LoraLinear(HIDDEN, KV_HEADS * HEAD, rank, bias=True)
        self.v = LoraLinear(HIDDEN, KV_HEADS * HEAD, rank, bias=True)
        self.o = LoraLinear(HEADS * HEAD, HIDDEN, rank)
        self.gate, self.up = LoraLinear(HIDDEN, MLP, rank), LoraLinear(HIDDEN, MLP, rank)
        self.down = LoraLinear(MLP, HIDDEN, rank)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, t, HEADS, HEAD).transpose(1, 2)
        k = self.k(h).view(b, t, KV_HEADS, HEAD).transpose(1, 2)
        v = self.v(h).view(b, t, KV_HEADS, HEAD).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, HIDDEN)
        x = x + self.o(a)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(torch.nn.Module):
    def __init__(self, rank):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN, dtype=torch.bfloat16)
        self.embed.requires_grad_(False)
        self.blocks = torch.nn.ModuleList(Block(rank) for _ in range(LAYERS))
        self.norm = RMSNorm(HIDDEN)

    def forward(self, tokens):
        t = tokens.shape[1]
        pos = torch.arange(t, device=tokens.device, dtype=torch.float32)
        inv = 1.0 / (1e6 ** (torch.arange(0, HEAD, 2, device=tokens.device, dtype=torch.float32) / HEAD))
        angles = torch.outer(pos, inv)
        cos = torch.cat((angles, angles), -1).cos().to(torch.bfloat16)
        sin = torch.cat((angles, angles), -1).sin().to(torch.bfloat16)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return F.linear(self.norm(x), self.embed.weight)  # tied embeddings, as Qwen2.5-0.5B


probe = Probe()
probe.phase("warmup")
start = time.time()
torch.manual_seed(0)
model = Model(args.rank).cuda()
trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=1e-4)
step, steady = 0, False
last = time.perf_counter()
while time.time() - start < args.seconds:
    tokens = torch.randint(0, VOCAB, (args.batch, args.seq + 1), device="cuda")
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
    if step % 50 == 0:
        loss.item()  # a log line's worth of synchronisation, as a training loop has
    now = time.perf_counter()
    if not steady and time.time() - start >= args.warmup:
        probe.phase("steady", expect="host",
                    label=f"LoRA r{args.rank} on a Qwen2.5-0.5B shape, {args.batch} x {args.seq} tokens, no loader")
        steady = True
    probe.record(now - last, step=step)  # no data_seconds: there is no loader to wait for
    last = now
probe.phase("end")
print(f"host_bound: {step} steps in {time.time() - start:.1f} s", flush=True)
