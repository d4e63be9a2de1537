"""The explore job: one problem, answered from the results store when it holds the answer,
else measured on the GPU with each finished direction kept in the store at once."""
from __future__ import annotations

from typing import Callable, Optional

from ..core.errors import UserError
from ..core.exploration import Exploration
from ..core.options import ExploreOptions, flag, given_options
from ..core.problem import ConvProblem
from .events import Notify, check_callbacks, notifier
from . import lazy_measure
from .stores import StoreChoice, opened, saver

__all__ = ["explore"]


def explore(problem: ConvProblem, options: Optional[ExploreOptions] = None,
            progress: Optional[Callable[[str], None]] = None, *, store=None,
            refresh: bool = False, on_direction: Optional[Callable] = None,
            skip_engines_if_unbuilt: bool = False, notify: Optional[Notify] = None,
            bench=None, **kw) -> Exploration:
    """Explore every direction of ``problem`` that ``options`` name, and return the
    Exploration (measure.pipeline.explore says what it holds: times in ms, sizes in bytes).

    ``options``: an ExploreOptions, or the same as keywords (``budget_ms=10,
    engines=False``). ``store``: None or False (no results store, the default), True (the
    default store file) or a path: a problem measured before under the same environment
    and options is answered from it without touching the GPU (unless ``refresh``), and
    each finished direction is kept there at once, so an interruption loses only the
    direction in flight. ``progress`` hears one line per step; ``on_direction`` gets each
    direction as it finishes. ``skip_engines_if_unbuilt``: where the extension was built
    without cudnn-frontend, explore without engine configs (a note says so) instead of
    raising MissingDependencyError."""
    if not isinstance(problem, ConvProblem):
        raise UserError(f"problem {type(problem).__name__}: valid: a ConvProblem "
                        f"(ConvProblem.create(shape=..., ...))")
    check_callbacks(progress=progress, on_direction=on_direction, notify=notify)
    skip_engines_if_unbuilt = flag(skip_engines_if_unbuilt, "skip_engines_if_unbuilt")
    if options is None:
        options = ExploreOptions.create(**kw)
    elif kw:
        raise UserError(f"pass either options or keywords, not both ({', '.join(kw)})")
    options = given_options(options)
    notify = notifier(notify)
    choice = StoreChoice.of(store, refresh)
    if bench is None:
        # no GPU: said in milliseconds, before any process starts or torch is imported;
        # the store cannot answer there either (its answers are keyed by a GPU's
        # environment, which needs the GPU to be read)
        lazy_measure.require_driver()
    with opened(choice, notify) as db:
        if db is not None and not choice.refresh:  # before torch is imported: milliseconds
            exp = _stored(db, problem, options)
            if exp is not None:
                notify("info", f"answered from the results store '{db.path}' (measured "
                               f"{exp.created}); --refresh measures again")
                return exp
        pipeline = lazy_measure.measuring()
        own = bench is None
        if own:
            # Note [children started ahead] (measure/prestart.py): PyTorch's children and
            # the engine worker start before this process imports torch (the extension's
            # check below does), so that their imports overlap ours. On the H200 the
            # main job's first child had waited 3.5 s for its imports when they started
            # after that check.
            bench = pipeline.GpuBench(options.device)
            bench.prestart(problem, options)
        try:
            if (own and skip_engines_if_unbuilt and options.engines
                    and not lazy_measure.frontend_built(options.device)):
                options = options.updated(engines=False)
                notify("note", "engine configs skipped: this build of the extension has no "
                               "cudnn-frontend (pip install nvidia-cudnn-frontend, then "
                               "rebuild)")
            keep = saver(db, problem, options, notify)

            def finished(env, measurement, d):
                if keep is not None:
                    keep(env, measurement, d)
                if on_direction is not None:
                    on_direction(env, measurement, d)

            return pipeline.explore(problem, options, progress=progress,
                                    on_direction=finished, bench=bench)
        finally:
            if own:
                bench.close()


def _stored(db, problem: ConvProblem, options: ExploreOptions) -> Optional[Exploration]:
    """The store's answer for ``problem``, looked up under this GPU's environment as last
    seen (measure/envcache.py: no torch, no CUDA) or, when anything it depends on changed,
    as the GPU reports it now; None when the store has none."""
    from ..measure import envcache

    env = envcache.cached_environment(options.device)
    if env is None:
        env = lazy_measure.measuring().environment(options.device)
        envcache.remember(env)
    return db.lookup(problem, env, options)
