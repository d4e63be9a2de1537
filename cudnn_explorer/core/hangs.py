"""Engine configs known to hang: cuDNN accepts them and builds their plans, and their launch
never ends (Note [known hangs]). Pure: the caller says which cuDNN and which GPU."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from .knobs import OPERATION_OF, Knobs

__all__ = ["Hang", "KNOWN_HANGS", "KNOWN_HANG_LIMIT_S", "known_hang", "hang_rule"]


@dataclass(frozen=True)
class Hang:
    """Configs of ``engine`` for ``operation`` whose ``knob`` is set to a value that is not
    a power of two, on cuDNN versions from ``cudnn_from`` up to (not including)
    ``cudnn_to`` and GPUs of compute capability ``capability``."""

    operation: str
    engine: int
    knob: int
    cudnn_from: int
    cudnn_to: int
    capability: Tuple[int, int]

    def covers(self, operation: str, engine: int, knobs: Knobs, cudnn: int,
               capability: Tuple[int, int]) -> bool:
        return (operation == self.operation and engine == self.engine
                and self.cudnn_from <= cudnn < self.cudnn_to
                and tuple(capability) == self.capability
                and any(k == self.knob and v > 0 and v & (v - 1) for k, v in knobs))

    def describe(self) -> str:
        return (f"known to hang: engine {self.engine} with knob {self.knob} set to other "
                f"than a power of two never ended a launch on cuDNN "
                f"{_version(self.cudnn_from)} with compute capability "
                f"{self.capability[0]}.{self.capability[1]} (docs/limits.md); "
                f"not tried by the quick profile; the thorough one gives its launches "
                f"{KNOWN_HANG_LIMIT_S:g} s")


# Note [known hangs]: on the H200 (compute capability 9.0) with cuDNN 9.19, the run-time
# compiled engines 77 (backward data) and 69 (backward filter) never ended a launch with
# knob 17 (its range 1-128) set to 3, 5, 6, 7, 9 or 10, and ran with 1, 2, 4 and 8: every
# config the sampling drew with a value that is not a power of two hung, every other ran,
# on float16 channels_last 3x3 problems (8x64x28x28, 32x128x28x28), a 3-D float16 one
# (4x32x16x32x32) and a bfloat16 1x1 stride-2 one (32x512x28x28), in both profiles. Each
# cost a quick search about 13 s (the round-1 watchdog's 10 s, then the worker's restart):
# 52-54 s of the 3-D problem's backward directions' 62-64 s. With 3, 5, 6 and 7 skipped
# the sampling drew 9 and 10 instead, which hung too. They never rank, so the quick
# profile leaves them out, recorded as skipped with the reason (once their engine builds a
# config for the problem: Note [hangs of engines that accept]); the thorough profile still
# tries them, so a cuDNN release that fixes them shows it there, with KNOWN_HANG_LIMIT_S
# for their launches instead of the whole --engine-config-timeout (60 s each, 8 minutes
# for the 3-D problem's eight): those of these engines that ran took 0.05-1.6 ms a launch
# there, so their whole timing (a budget of 25-100 ms of samples) ends far sooner. The
# rules name the versions and the GPU they were seen on, and no others. Listed configs
# (cuDNN's heuristics, PyTorch's) are always tried, with that limit.
KNOWN_HANG_LIMIT_S = 10.0
KNOWN_HANGS = (
    Hang("ConvBwdData", 77, 17, 91900, 92000, (9, 0)),
    Hang("ConvBwdFilter", 69, 17, 91900, 92000, (9, 0)),
)

# Note [hangs of engines that accept]: the rule of configs known to hang (KNOWN_HANGS)
# names an engine and knob values, not problems, and most problems' engines accept none of
# those configs: for the default float32 problem (32x3x224x224, 3x3) on an H100, engine 77
# rejected all 128 configs the thorough profile tried, while the quick profile listed 120
# of them per backward direction as skipped, "known to hang", and counted them among the
# valid configs. A config can hang only once it is accepted and launched, and cuDNN says
# whether it accepts one when its plan is built, which launches nothing. So until a config
# of its engine has been built, a config known to hang is built, and not launched: one
# cuDNN rejects is counted as rejected, like any other; the first one it builds is recorded
# as skipped, and so are the engine's later ones, without a build (the engine accepts the
# problem, and building a run-time compiled config costs up to seconds). A rejection
# launches nothing and costs what every other rejected config costs (the main job's
# backward directions rejected 2,744 and 2,952 configs on that H100, in round 1's 1.8 and
# 2.4 s with every build and brief timing). measure/engines.py applies it; the rule
# stays one of engines and knobs.


def _version(v: int) -> str:
    return f"{v // 10000}.{v // 100 % 100}"


def known_hang(direction: str, engine: int, knobs: Knobs, cudnn: int,
               capability: Tuple[int, int]) -> Optional[str]:
    """Why the config (``engine``, ``knobs``) of ``direction`` is known to hang on cuDNN
    ``cudnn`` (e.g. 91900) and a GPU of ``capability``, or None."""
    op = OPERATION_OF[direction]
    rule = next((h for h in KNOWN_HANGS if h.covers(op, engine, knobs, cudnn, capability)),
                None)
    return rule.describe() if rule is not None else None


def hang_rule(direction: str, cudnn: int, capability: Tuple[int, int]
              ) -> Callable[[int, Knobs], Optional[str]]:
    """known_hang for one direction, cuDNN and GPU: (engine, knobs) -> why, or None."""
    return lambda engine, knobs: known_hang(direction, engine, knobs, cudnn, capability)
