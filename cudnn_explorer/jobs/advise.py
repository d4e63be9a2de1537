"""The advise job: should torch.backends.cudnn.benchmark be on for a workload? The model
runs in fresh processes with benchmark on, off and deterministic, at every input size;
the Advice it returns weighs the first calls' cost against the steady-state saving."""
from __future__ import annotations

import numbers
from dataclasses import replace
from typing import Callable, List, Optional, Sequence, Tuple, Union

from ..core.advice import Advice
from ..core.workload_sizes import check_sizes
from ..core.stability import plan_counts
from ..core.capture import ModelSpec
from ..core.errors import UserError
from ..core.options import ExploreOptions, given_options
from ..core.schema import utc_now
from ..core.version import __version__
from .events import Notify, check_callbacks, quiet_progress
from .sweep import SweepRun, SweepSettings

__all__ = ["advise"]


def advise(model: Union[str, ModelSpec], *, iterations: int = 10000,
           sizes: Optional[Sequence[Tuple[int, float]]] = None,
           options: Optional[ExploreOptions] = None, target_ci: float = 0.005,
           graph: bool = True, repeats: int = 0, store=None, refresh: bool = False,
           plans: Optional[str] = None, uncovered: str = "off",
           allow_environment: bool = False,
           progress: Optional[Callable[[str], None]] = None,
           notify: Optional[Notify] = None, **kw) -> Advice:
    """The Advice for a workload of ``iterations`` iterations of ``model`` (ModelSpec.of
    says what ``model`` and the keywords may be). ``sizes``: the input sizes with their
    frequencies, [(size, count)] (default: the spec's sizes, equally frequent, or its
    one input size). Steady iterations are timed until each mean's 95% confidence
    interval is within +-``target_ci`` (a fraction) of it, as replays of a CUDA graph of
    the whole step (``graph``), else eagerly. ``repeats`` (0, or 2 to 50): that many more
    runs with benchmark on, each in a fresh process, for the stability of its picks.
    ``options``: device, seed, child timeout and benchmark limit. ``store`` as in
    sweep_model. ``plans``: a plan file's path: a third mode, the model pinned to its
    plans in a fresh process, whose convolutions the file does not cover run with
    benchmark ``uncovered`` ("off" or "on"); a file from another environment is refused,
    naming what differs, unless ``allow_environment``. Where the runs with benchmark on
    and off did not both finish, the Advice has no verdict (``decidable`` is False) and
    its runs say why."""
    if isinstance(iterations, bool) or not isinstance(iterations, int) or \
            not 1 <= iterations <= 10**12:
        raise UserError(f"iterations {iterations!r}: valid: an integer from 1 to 10**12")
    if isinstance(target_ci, bool) or not isinstance(target_ci, numbers.Real) or \
            not 0.0001 <= target_ci <= 0.5:
        raise UserError(f"target_ci {target_ci!r}: valid: a fraction from 0.0001 to 0.5")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats == 1 \
            or not 0 <= repeats <= 50:
        raise UserError(f"repeats {repeats!r}: valid: 0 (off) or 2 to 50 fresh processes")
    settings = SweepSettings.create(profile=None, iterations=10, store=store,
                                    refresh=refresh, plans=plans, uncovered=uncovered,
                                    allow_environment=allow_environment, graph=graph,
                                    explore=False)  # a bad file or setting: before the model
    # runs; PyTorch's run leaves out benchmark with every candidate timed
    options = given_options(options).updated(every_candidate_mode=False)
    check_callbacks(progress=progress, notify=notify)
    dist = check_sizes(sizes) if sizes is not None else None
    spec = ModelSpec.of(model, **kw)
    if dist:
        spec = spec.over_sizes([s for s, _ in dist])
    elif spec.sizes:
        dist = [(s, 1.0) for s in spec.sizes]
    else:
        dist = [(spec.input_shape[-1], 1.0)]
    # Note [model children started ahead]: the modes' processes import during the capture
    with SweepRun(spec, options, settings, notify=notify, say=quiet_progress(progress)) as run:
        cap = run.capture()
        env = run.environment()
        _, plan_file = run.pinned()
        pytorch_run = run.run_modes(timing=replace(run.timing, target_ci=target_ci))
        rep, stability = None, []
        if repeats:
            from ..measure.pytorch_picks import ModeSpec
            from ..model.run_modes import retime_plans

            again: List[ModeSpec] = [ModeSpec(f"benchmark, repeat {k + 1}", "benchmark",
                                              False, options.benchmark_limit)
                                     for k in range(repeats)]
            rep = run.run_modes(again, timing=replace(run.timing, iterations=3, warmup=1))
            stability = retime_plans(cap, plan_counts(rep), run.options, run.say)
    return Advice(capture=cap, pytorch_run=pytorch_run, sizes=[[s, c] for s, c in dist],
                  iterations=iterations, environment=env, tool_version=__version__,
                  created=utc_now(), repeats=rep, stability=stability,
                  plans=plans or "",
                  plans_predicted_ms=plan_file.predicted_gain_ms if plan_file else None)
