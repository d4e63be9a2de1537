"""Legacy cuDNN algorithms of one direction: cudnnFind*Ex, cudnnGet*_v7, every
cudnnGet*WorkspaceSize, then each successful row re-timed, checked and, when asked, its
kernels read; every row is built once here, complete.

:class:`LegacyLab` holds one direction's GPU tensors, descriptors and reference; the
pipeline talks to it through four methods (find, measure, kernels, close), which is the
seam CPU tests replace with a fake (tests/fakes.py); it also keeps where its time went
(``setup_s``: its tensors and reference; ``checks_s``: the checks so far).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from ..core import analysis
from ..core.errors import ResourceError
from ..core.options import ExploreOptions, TimingSpec
from ..core.problem import ConvProblem
from ..core.records import AlgoResult, Timing, WorkspaceEntry, find_row_note, verdict
from ..core.staging import (ROUNDS, Timed, bar_ms, cutoff_ms, decided, final_timing,
                             is_record, round_timing, skipped_round, survivors)
from . import native
from .kernels import distinct, kernel_names
from .tensors import OUTPUT_OF, Check, check_output, direction_data
from .timing import timing_from_native

__all__ = ["LegacyLab", "LegacyRows", "measure_legacy", "find_math_types"]


class LegacyLab:
    """One direction of ``problem`` on GPU ``device``: tensors (seeded), the extension's
    descriptors and, with ``check``, the float64 reference."""

    def __init__(self, problem: ConvProblem, direction: str, options: ExploreOptions):
        self.problem, self.direction = problem, direction
        t0 = time.perf_counter()
        # reference_on_cpu: Note [reference on the CPU] in measure/tensors.py
        self.tensors, self.native, self.ref, self.reference_on_cpu = direction_data(
            problem, direction, options.device, options.seed, options.check)
        # where its time goes (s): the tensors and the reference; the checks so far (None:
        # it checks nothing)
        self.setup_s = time.perf_counter() - t0
        self.checks_s: Optional[float] = 0.0 if options.check else None
        self.math_types = find_math_types(problem, options)
        self._kernels = {}  # (algo, math type) -> kernels its timing's graph named

    def find(self, cap_bytes: Optional[int]):
        """The native FindReport (csrc/find.h): Find under the math types
        find_math_types says, PyTorch's first, with the workspace that fits."""
        return native.find_algorithms(self.direction, self.native,
                                      -1 if cap_bytes is None else cap_bytes,
                                      self.math_types)

    def measure(self, algo: int, math_type: str, timing: Optional[TimingSpec],
                check: bool, cutoff_ms: float = 0.0, records: bool = False,
                records_over: Optional[float] = None):
        """(Timing or None, Check or None) of one algorithm: re-timed with ``timing``
        (None: run once; a launch slower than ``cutoff_ms`` > 0 ends it, Note [cut
        launches]) and, with ``check``, its output checked against the reference (with
        ``records``, only when its time beats ``records_over``: Note [records checked])."""
        out = self.tensors[OUTPUT_OF[self.direction]]
        out.fill_(float("nan"))  # poison: an element the algorithm does not write stays NaN
        t = None
        if timing is not None:
            res = native.time_algorithm(self.direction, self.native, algo, math_type, timing,
                                        kernels=True, cutoff_ms=cutoff_ms)
            t = timing_from_native(res)
            if res.kernels_read:
                self._kernels[(algo, math_type)] = distinct(res.kernels)
        else:
            native.run_algorithm(self.direction, self.native, algo, math_type)
        c = None
        if check and records and not is_record(t.median_ms if t else None, records_over):
            check = False
        if check and self.ref is not None:
            t0 = time.perf_counter()
            try:
                c = check_output(self.problem, out, self.ref, math_type)
            except RuntimeError as e:
                if not native.is_out_of_memory(e):
                    raise
                raise native.out_of_memory("checking the output", 2 * out.numel() * 8,
                                           out.device.index or 0) from None
            finally:
                self.checks_s += time.perf_counter() - t0
        return t, c

    def kernels(self, algo: int, math_type: str):
        """The kernels one launch runs: as its timing's graph named them, else read now."""
        if (algo, math_type) in self._kernels:
            return self._kernels[(algo, math_type)]
        return kernel_names(lambda: native.run_algorithm(self.direction, self.native, algo,
                                                         math_type))

    def close(self) -> None:
        """Drop the tensors and return PyTorch's cached memory to the device, for the
        engine worker (another process) and the next direction (Note [cached memory and
        cuDNN] in measure/tensors.py)."""
        self.tensors = self.native = self.ref = None
        native.release_cached_memory()


def find_math_types(problem: ConvProblem, options: ExploreOptions) -> Tuple[str, ...]:
    """The math types Find runs under: every one the problem's dtype permits, PyTorch's
    first; PyTorch's alone where ``options.every_math_type`` is off (Note [model legacy
    rows] in core/options.py)."""
    every = problem.find_math_types
    return every if options.every_math_type else every[:1]


class LegacyRows(NamedTuple):
    """Everything the legacy API said about one direction, as records."""

    math_type: str
    find: List[AlgoResult]
    heuristics: List[AlgoResult]
    workspace: List[WorkspaceEntry]
    workspace_needed_bytes: int
    workspace_given_bytes: int
    find_requested: int
    find_returned: int
    find_wall_ms: float
    searched_math_types: List[str]
    find_wall_ms_all: float
    workspace_free_bytes: Optional[int]
    find_errors: List[str]
    reference_on_cpu: bool = False  # Note [reference on the CPU] in measure/tensors.py
    rounds: Sequence[dict] = ()  # the staged search's rounds (DirectionResult.legacy_rounds)
    setup_s: Optional[float] = None  # the lab's tensors and reference (s)
    checks_s: Optional[float] = None  # the rows' checks against the reference (s)

    @property
    def ok(self) -> List[AlgoResult]:
        return [r for r in self.find if r.ok]


def measure_legacy(problem: ConvProblem, direction: str, lab, options: ExploreOptions,
                   gpu_name: str, want_kernels: bool,
                   say: Callable[[str], None] = lambda m: None,
                   finalists: Sequence[str] = ()) -> LegacyRows:
    """Find, then every successful row re-timed (options.timing) and checked
    (options.check), with its kernels when ``want_kernels`` (to match PyTorch's picks and
    engine configs to it). With ``options.staged``, the rows are timed in the staged
    search's rounds (Note [staged search] in core/staging.py): every one briefly, those
    near the best again, the finalists in full; ``finalists`` ("ALGO (MATH_TYPE)", e.g.
    PyTorch's legacy pick) always reach the final round, and so do the heuristics' first
    row and the fastest deterministic one. Before the final round a row is checked when it
    leads its round (Note [records checked] in core/staging.py); unstaged, every row is."""
    say(f"{direction}: cudnnFind")
    rep = lab.find(options.max_workspace_bytes)
    t_first = time.perf_counter()
    workspace = [WorkspaceEntry(w.algo, w.algo_name, w.math_type, w.status,
                                None if w.bytes < 0 else int(w.bytes)) for w in rep.workspace]
    asks = {(w.algo, w.math_type): w.bytes for w in workspace}
    found = unique_rows(rep.find)
    free = None if rep.workspace_free < 0 else int(rep.workspace_free)
    n_ok = sum(1 for r in found if r.status_code == 0)
    staged = options.staged and options.retime
    first = round_timing(options.timing, ROUNDS[0]) if staged else options.timing
    timings: Dict[int, Optional[Timing]] = {}
    checks: Dict[int, Optional[Check]] = {}
    kernels: Dict[int, Optional[List[str]]] = {}
    notes: Dict[int, str] = {}
    i = 0
    for n, r in enumerate(found):
        if r.status_code != 0:
            need = max(asks.get((r.algo, r.math_type)) or 0, int(r.memory_bytes) or 0)
            notes[n] = find_row_note(need, int(rep.workspace_given),
                                     options.max_workspace_bytes is not None, free)
            continue
        i += 1
        if options.retime or options.check:
            say(f"{direction}: {'re-timing' if options.retime else 'checking'} {i}/{n_ok} "
                f"{r.algo_name} ({r.math_type})")
            best = _bar(timings, checks, timings)
            try:
                timings[n], checks[n] = lab.measure(
                    r.algo, r.math_type, first if options.retime else None, options.check,
                    cutoff_ms=cutoff_ms(best) if staged else 0.0, records=staged,
                    records_over=best)
            except ResourceError as e:  # this row only: the others may still fit
                notes[n] = str(e)
        if want_kernels and not notes.get(n):
            kernels[n] = list(lab.kernels(r.algo, r.math_type))
    left: Dict[int, Tuple[int, Optional[float]]] = {}
    rounds: List[dict] = []
    if staged:
        keep = set(finalists)
        if rep.heuristics:
            keep.add(f"{rep.heuristics[0].algo_name} ({rep.heuristics[0].math_type})")
        left, rounds = _rounds(lab, RowsSoFar(found, timings, checks, notes), options, keep,
                               direction, say, time.perf_counter() - t_first)
    rows = []
    for n, r in enumerate(found):
        ok = r.status_code == 0
        timing, check = timings.get(n), checks.get(n)
        peak = analysis.peak_for(gpu_name, problem.dtype, r.math_type) if ok else None
        gone = left.get(n)
        rows.append(AlgoResult(
            algo=r.algo, algo_name=r.algo_name, math_type=r.math_type, status=r.status,
            status_code=r.status_code,
            time_ms=float(r.time_ms) if r.time_ms >= 0 and ok else None,
            workspace_bytes=int(r.memory_bytes), deterministic=bool(r.deterministic),
            note=notes.get(n, ""), timing=timing,
            max_error=check.max_error if check else None,
            tolerance=check.tolerance if check else None,
            output_finite=check.output_finite if check else None,
            peak_tflops=peak.tflops if peak else None, peak_unit=peak.unit if peak else "",
            kernels=kernels.get(n), found_under=r.found_under,
            pytorch_candidate=r.found_under == rep.math_type,
            left_round=gone[0] if gone else None, left_ratio=gone[1] if gone else None))
    heuristics = [AlgoResult(algo=h.algo, algo_name=h.algo_name, math_type=h.math_type,
                             status=h.status, status_code=h.status_code, time_ms=None,
                             workspace_bytes=int(h.memory_bytes),
                             deterministic=bool(h.deterministic))
                  for h in rep.heuristics]  # cudnnGet*_v7 times nothing
    return LegacyRows(rep.math_type, rows, heuristics, workspace, int(rep.workspace_needed),
                      int(rep.workspace_given), int(rep.requested), int(rep.returned),
                      float(rep.find_wall_ms), list(rep.searched), float(rep.find_wall_ms_all),
                      free, list(rep.find_errors), bool(lab.reference_on_cpu), rounds,
                      lab.setup_s, lab.checks_s)


def _bar(timings: Dict[int, Optional[Timing]], checks: Dict[int, Optional[Check]],
         rows: Iterable[int]) -> Optional[float]:
    """The time a row must beat to lead its round, after ``rows``: Note [records checked]
    in core/staging.py."""
    return bar_ms((timings[n].median_ms if timings.get(n) else None, _wrong(checks.get(n)))
                  for n in rows)


@dataclass(frozen=True)
class RowsSoFar:
    """Find's rows of one direction (``found``: unique_rows', successful or not) and what
    is known of each so far, by its index in ``found``: its ``timings`` and ``checks``
    (None: not timed, or not checked) and its ``notes`` (why Find's row failed, or why it
    could not be timed: the memory it lacked). The staged search's later rounds fill the
    dicts in place (_rounds)."""

    found: Sequence
    timings: Dict[int, Optional[Timing]]
    checks: Dict[int, Optional[Check]]
    notes: Dict[int, str]


def _rounds(lab, rows: RowsSoFar, options: ExploreOptions, keep: set, direction: str,
            say, first_s: float) -> Tuple[Dict[int, Tuple[int, Optional[float]]], List[dict]]:
    """The legacy rows' staged search after its first round (``rows.timings`` and
    ``rows.checks`` updated in place as rows are timed again; ``first_s``, round 1's wall
    time): ({row that left: (its round, its median over the round's best)}, each round's
    {"round", "timed", "left", "wall_s"} and the finalists' {"round": "final", "timed",
    "wall_s"}). A row found WRONG (when it led a round, or in the final one: Note [records
    checked] in core/staging.py) never sets the best and cannot rank; it leaves in the
    round it was found in, unless named (``keep``: PyTorch's legacy pick is then timed in
    full and shown WRONG). A row that no longer fits in memory when timed again keeps its
    last time, leaves in the round it was in, and its note says why (``rows.notes``)."""
    found, timings, checks, notes = rows.found, rows.timings, rows.checks, rows.notes

    def name(n: int) -> str:
        return f"{found[n].algo_name} ({found[n].math_type})"

    def again(n: int, spec: TimingSpec, check: bool, number: int, records: bool = False,
              best: Optional[float] = None) -> bool:
        try:
            timing, checked = lab.measure(found[n].algo, found[n].math_type, spec, check,
                                          records=records, records_over=best)
        except ResourceError as e:  # this row only: the others may still fit
            notes[n] = str(e)
            left[n] = (number, None)
            return False
        timings[n] = timing
        if checked is not None:
            checks[n] = checked
        return True

    live = [n for n, t in timings.items() if t is not None]
    left: Dict[int, Tuple[int, Optional[float]]] = {}
    rounds: List[dict] = []
    t = time.perf_counter()
    for number, rnd in enumerate(ROUNDS, 1):
        spec = round_timing(options.timing, rnd)
        timed = len(live)
        why = decided(live, {n for n in live if name(n) in keep}) if number > 1 else None
        if why:  # Note [decided rounds] in core/staging.py
            rounds.append(skipped_round(number, why))
            t = time.perf_counter()
            continue
        if number > 1:
            say(f"{direction}: legacy round {number}: timing {len(live)} rows again "
                f"({spec.budget_ms:g} ms each)")
            done: List[int] = []
            for n in live:  # a row not checked yet is checked when it leads the round
                if again(n, spec, options.check and checks.get(n) is None, number,
                         records=True, best=_bar(timings, checks, done)):
                    done.append(n)
            live = done
        # a WRONG row sets no bar; it leaves unless named (Note [records checked])
        wrong = {n for n in live if _wrong(checks.get(n))}
        named = {n for n in wrong if name(n) in keep}
        left.update({n: (number, None) for n in wrong - named})
        right = [n for n in live if n not in wrong]
        always = {n for n in right if name(n) in keep}
        det = [n for n in right if found[n].deterministic]
        if det:
            always.add(min(det, key=lambda n: timings[n].median_ms))
        stay, gone = survivors({n: Timed(timings[n].median_ms, timings[n].spread)
                                for n in right}, rnd.keep_within, always)
        left.update({n: (number, ratio) for n, ratio in gone.items()})
        live = [n for n in live if n in named or n in stay]
        rounds.append({"round": number, "timed": timed, "left": timed - len(live),
                       "wall_s": first_s if number == 1 else time.perf_counter() - t})
        t = time.perf_counter()
    them = "them" if len(live) != 1 else "it"
    say(f"{direction}: {len(live)} legacy finalist{'s' * (len(live) != 1)}: timing {them} "
        f"in full")
    for n in live:  # Note [finalists' warm-up] in core/staging.py
        again(n, final_timing(options.timing), options.check, len(ROUNDS))
    rounds.append({"round": "final", "timed": len(live), "wall_s": time.perf_counter() - t})
    return left, rounds


def _wrong(c: Optional[Check]) -> bool:
    """A row's check found it WRONG (not finite, or beyond its bound)."""
    return c is not None and verdict(c) is False


def unique_rows(found):
    """Find's rows, one per (algorithm, math type): Find under one math type also returns
    rows of others, so the calls overlap. The first call's row is kept (PyTorch's math
    type comes first, so its rows are exactly the ones PyTorch's legacy path sees), in
    the calls' order."""
    seen, out = set(), []
    for r in found:
        if (r.algo, r.math_type) not in seen:
            seen.add((r.algo, r.math_type))
            out.append(r)
    return out
