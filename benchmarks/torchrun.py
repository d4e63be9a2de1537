"""How much faster is a model's sweep with one process per GPU (torchrun) than on one GPU?

``python -m benchmarks.torchrun [--gpus 2] [--model resnet50] [--batch 32] [--amp fp16]
[--repeats 1]`` runs the sweep as a user would, each run with a fresh results store:
``python -m cudnn_explorer model MODEL ... --store FILE --json OUT`` on one GPU, then
``torchrun --standalone --nproc-per-node N -m cudnn_explorer model ...`` on N, in turns.
Needs every GPU of the machine; run it alone. Goal: two GPUs at most 0.6x one GPU's time.
"""
import argparse
import json
import sys

from . import harness
from .harness import Case, Figure

QUESTION = __doc__.split("\n\n")[0].replace("\n", " ")
FIGURES = [Figure("wall_s", "whole sweep", "s"),
           Figure("problems", "unique problems in the result", "", better="")]
BENCH = harness.Benchmark("torchrun", QUESTION, FIGURES, baseline="1 GPU")


def problems(path: str, wall_s: float) -> dict:
    with open(path) as f:
        return {"problems": float(len(json.load(f).get("entries", [])))}


def cases(a) -> list:
    sweep = ["-m", "cudnn_explorer", "model", a.model, "--batch", str(a.batch), "--amp", a.amp,
             "--channels-last", "--store", "{tmp}/results.db", "--json", "{out}"]
    row = " ".join(sweep[3:9])
    return [Case(row, "1 GPU", tuple(sweep), env=(("CUDA_VISIBLE_DEVICES", "0"),),
                 read=problems),
            Case(row, f"{a.gpus} GPUs", ("-m", "torch.distributed.run", "--standalone",
                                          "--nproc-per-node", str(a.gpus), *sweep),
                 read=problems)]


def parse(argv=None):
    ap = argparse.ArgumentParser(description=QUESTION)
    harness.common_args(ap, "data/benchmarks/torchrun.json", repeats=1)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--amp", default="fp16")
    return ap.parse_args(argv)


def main(argv=None, runner=harness.run_process, env=None) -> int:
    a = parse(argv)
    if a.gpus < 2:
        raise SystemExit(f"--gpus {a.gpus}: valid: 2 or more")
    return BENCH.run(cases(a), a, runner, env)


if __name__ == "__main__":
    sys.exit(main())
