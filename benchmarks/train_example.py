"""A training script as users write them, knowing nothing of cudnn_explorer: the zero-code
benchmark (benchmarks/zero_code.py) records, tunes and runs it unchanged.

``python benchmarks/train_example.py [--steps 16] [--batch 16] [--sizes 48,64,96]
[--amp bf16|off] [--channels-last] [--compile] [--cudnn-benchmark] [--penalty 0.1]
[--penalty-every 4] [--seed 0] [--out FILE]``

The model is built here: an encoder-decoder (strided 3x3 convolutions down, a residual
depthwise-separable block, transposed convolutions up). Each step draws its input size
from ``--sizes`` (every size in turn, in an order the seed shuffles) and trains it to
denoise under autocast. Every ``--penalty-every`` steps the loss adds a gradient penalty
(the squared norm of the score's gradient with respect to the input, as R1 regularises a
discriminator): double backward through every convolution. ``--compile`` compiles the
model for the main loss; the penalty runs the model eagerly, since torch.compile does not
differentiate twice (StyleGAN2's lazy R1 does the same). ``--out`` gets, as JSON, each
step's wall time (synchronised), its loss, the first step's peak of allocated GPU memory,
the run's, and the steady step: the median of the second half's steps.
"""
import argparse
import json
import random
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """A residual depthwise-separable block."""

    def __init__(self, c):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.pw = nn.Conv2d(c, c, 1, bias=False)

    def forward(self, x):
        return x + self.pw(F.gelu(self.bn(self.dw(x))))


class Net(nn.Module):
    """Down by four with strided convolutions, a block, up by four with transposed ones."""

    def __init__(self, width=32):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.down1 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.down2 = nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1)
        self.block = Block(4 * width)
        self.up1 = nn.ConvTranspose2d(4 * width, 2 * width, 4, stride=2, padding=1)
        self.up2 = nn.ConvTranspose2d(2 * width, width, 4, stride=2, padding=1)
        self.head = nn.Conv2d(width, 3, 3, padding=1)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = F.relu(self.down1(x))
        x = F.relu(self.down2(x))
        x = self.block(x)
        x = F.relu(self.up1(x))
        x = F.relu(self.up2(x))
        return self.head(x)


def parse(argv=None):
    ap = argparse.ArgumentParser(description="Train a small denoiser with a gradient penalty.")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--sizes", default="48,64,96", help="input sizes, comma-separated")
    ap.add_argument("--amp", choices=("bf16", "off"), default="bf16")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--cudnn-benchmark", action="store_true")
    ap.add_argument("--penalty", type=float, default=0.1)
    ap.add_argument("--penalty-every", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    try:
        a.size_list = [int(v) for v in a.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes {a.sizes}: valid: sizes divisible by 4, comma-separated")
    if not a.size_list or any(v < 4 or v % 4 for v in a.size_list):
        ap.error(f"--sizes {a.sizes}: valid: sizes divisible by 4 (the model halves twice)")
    if a.steps < 1 or a.penalty_every < 1:
        ap.error(f"--steps {a.steps}, --penalty-every {a.penalty_every}: valid: 1 or more")
    return a


def schedule(sizes, steps, seed):
    """Each step's input size: every size in turn, each round shuffled by the seed."""
    rng, out = random.Random(seed), []
    while len(out) < steps:
        turn = list(sizes)
        rng.shuffle(turn)
        out += turn
    return out[:steps]


def main(argv=None):
    a = parse(argv)
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    torch.manual_seed(a.seed)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = Net().cuda().to(memory_format=fmt)
    forward = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=a.amp == "bf16")
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    sizes = schedule(a.size_list, a.steps, a.seed)
    times, losses, first_peak = [], [], 0
    for step, size in enumerate(sizes):
        clean = torch.randn(a.batch, 3, size, size, device="cuda", generator=gen)
        noisy = (clean + 0.1 * torch.randn(clean.shape, device="cuda", generator=gen)
                 ).contiguous(memory_format=fmt)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(**amp):
            loss = F.mse_loss(forward(noisy).float(), clean)
        if a.penalty and step % a.penalty_every == 0:
            x = noisy.detach().requires_grad_()
            with torch.autocast(**amp):
                score = model(x).float().square().mean()
            (grad,) = torch.autograd.grad(score, x, create_graph=True)
            loss = loss + a.penalty * grad.float().square().sum(dim=(1, 2, 3)).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if step == 0:
            first_peak = torch.cuda.max_memory_allocated()
    result = {"first_step_s": times[0], "first_step_peak_gib": first_peak / 2**30,
              "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
              "steady_step_ms": statistics.median(times[len(times) // 2:]) * 1e3,
              "step_ms": [t * 1e3 for t in times], "losses": losses, "sizes": sizes}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f)
    print(f"trained {a.steps} steps, last loss {losses[-1]:.4f}, steady step "
          f"{result['steady_step_ms']:.2f} ms")


if __name__ == "__main__":
    main()
