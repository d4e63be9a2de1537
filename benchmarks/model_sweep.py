"""How long does a whole model's sweep take, against PyTorch's own first iteration with
benchmark on, how much GPU memory does the tool use, and (``--gpus N``) how much faster
is the sweep with one process per GPU under torchrun than on one GPU?

``python -m benchmarks.model_sweep [--model resnet50] [--batch 32] [--amp fp16]
[--no-channels-last] [--profiles quick] [--gpus 1] [--repeats 1]`` runs ``python -m
cudnn_explorer model MODEL --batch B --amp A --channels-last --profile P --no-store --json
FILE`` as a user would, each run a fresh process, and reads PyTorch's own run of the model
from the sweep's file: its wall time (every mode's process), benchmark mode's first
iteration and first peak reserved memory. The tool's own part is the sweep's wall time
less PyTorch's run; the tool's peak is the GPU's used memory, sampled from outside, above
what was used before. Goals (ResNet-50 b32 AMP fp16 channels_last): at most 60 s on a
fresh machine (stretch: at most 3x the first iteration); the tool's peak at most the
model's peak reserved + 2 GiB.

``--gpus N`` (2 or more) adds, per profile, the same sweep under ``torchrun --standalone
--nproc-per-node N -m cudnn_explorer model ...`` (mode "P on N GPUs"), in turns with the
one-GPU sweep. Every run of both then gets a fresh results store (``--store FILE``: the
ranks need one, so the one-GPU sweep gets one too) and the one-GPU sweep
``CUDA_VISIBLE_DEVICES=0``. Both report the unique problems in their result beside their
wall time; the torchrun run reports nothing more (its ranks split PyTorch's run of the
model between them). Needs every GPU of the machine; run it alone. Goal: two GPUs at most
0.6x one GPU's time. Without ``--gpus`` (or with ``--gpus 1``) none of this runs.
"""
import argparse
import dataclasses
import json
import sys

from . import harness
from .harness import Case, Figure

QUESTION = __doc__.split("\n\n")[0].replace("\n", " ")
GIB = 2**30
FIGURES = [Figure("wall_s", "whole sweep", "s"),
           Figure("pytorch_run_s", "PyTorch's run of the model", "s"),
           Figure("own_s", "the tool's own part", "s"),
           Figure("problems_s", "the problems", "s"),
           Figure("first_iteration_ms", "benchmark mode's first iteration", "ms"),
           Figure("to_first_iteration", "whole sweep / first iteration", "x"),
           Figure("gpu_peak_gib", "the tool's peak GPU memory", "GiB"),
           Figure("model_reserved_gib", "the model's first peak reserved", "GiB")]
PROBLEMS = Figure("problems", "unique problems in the result", "", better="")  # --gpus
BENCH = harness.Benchmark("model_sweep", QUESTION, FIGURES)


def sweep_figures(path: str, wall_s: float) -> dict:
    """The figures of a saved sweep (``model --json``) and the process's wall time."""
    with open(path) as f:
        sweep = json.load(f)
    out = {}
    if isinstance(sweep.get("wall_s"), (int, float)):
        out["problems_s"] = float(sweep["wall_s"])
    modes = (sweep.get("pytorch_run") or {}).get("modes", [])
    if modes:
        out["pytorch_run_s"] = sum(m.get("wall_s") or 0.0 for m in modes)
        out["own_s"] = max(wall_s - out["pytorch_run_s"], 0.0)
    bench = next((m for m in modes if m.get("mode") == "benchmark" and not m.get("error")
                  and m.get("benchmark_limit") != 0 and m.get("sizes")), None)
    if bench is not None:
        size = bench["sizes"][0]
        out["first_iteration_ms"] = float(size["first_ms"])
        out["to_first_iteration"] = wall_s * 1e3 / size["first_ms"]
        out["model_reserved_gib"] = size["first_peak_reserved_bytes"] / GIB
    return out


def problems(path: str, wall_s: float) -> dict:
    """The unique problems of a saved sweep (its entries)."""
    with open(path) as f:
        return {"problems": float(len(json.load(f).get("entries", [])))}


def sweep_and_problems(path: str, wall_s: float) -> dict:
    """A one-GPU sweep's figures beside the torchrun one's: both."""
    return {**sweep_figures(path, wall_s), **problems(path, wall_s)}


def model_args(a) -> tuple:
    return (a.model, "--batch", str(a.batch), "--amp", a.amp) + \
        (("--channels-last",) if a.channels_last else ())


def cases(a) -> list:
    """Per profile the sweep on one GPU; with ``--gpus N`` (2 or more), each followed by
    the same sweep under torchrun on N, both with a fresh results store."""
    row = " ".join(model_args(a))
    out = []
    for p in a.profiles.split(","):
        sweep = ("cudnn_explorer", "model", *model_args(a), "--profile", p)
        if a.gpus < 2:
            out.append(Case(row, p, harness.module_argv(*sweep, "--no-store", "--json", "{out}"),
                            read=sweep_figures, watch_memory=True))
            continue
        stored = (*sweep, "--store", "{tmp}/results.db", "--json", "{out}")
        out.append(Case(row, p, harness.module_argv(*stored),
                        env=(("CUDA_VISIBLE_DEVICES", "0"),), read=sweep_and_problems,
                        watch_memory=True))
        out.append(Case(row, f"{p} on {a.gpus} GPUs", (
            "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.gpus),
            *harness.module_argv(*stored)), read=problems))
    return out


def parse(argv=None):
    ap = argparse.ArgumentParser(description=QUESTION)
    harness.common_args(ap, "data/benchmarks/model_sweep.json", repeats=1)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--amp", default="fp16")
    ap.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    ap.add_argument("--profiles", default="quick",
                    help="comma-separated sweep profiles, the first the baseline")
    ap.add_argument("--gpus", type=int, default=1,
                    help="2 or more: each sweep also under torchrun on this many GPUs, "
                         "every GPU of the machine (default 1: one GPU only)")
    a = ap.parse_args(argv)
    if a.gpus < 1:
        ap.error(f"--gpus {a.gpus}: valid: 1 or more")
    if a.gpus > 1 and "," in a.profiles:
        # every ratio is to the first mode: a second profile's N GPUs would be read against
        # the first profile's one GPU
        ap.error(f"--profiles {a.profiles} with --gpus {a.gpus}: valid: one profile")
    return a


def main(argv=None, runner=harness.run_process, env=None) -> int:
    a = parse(argv)
    cs = cases(a)
    figures = FIGURES + ([PROBLEMS] if a.gpus > 1 else [])
    return dataclasses.replace(BENCH, baseline=cs[0].mode, figures=figures).run(cs, a, runner,
                                                                               env)


if __name__ == "__main__":
    sys.exit(main())
