"""The results store: every measured direction kept in one SQLite file (WAL mode), keyed on
what decides a measurement, so that a repeated run answers at once and an interrupted
sweep loses only the problem in flight.

Key: the canonical problem, the direction, the environment (GPU, compute capability, SM
count, driver, CUDA, cuDNN, torch, cudnn-frontend) and the measurement options
(ExploreOptions less the directions and the device index). The stored value is the
DirectionResult as JSON: legacy algorithm ids and engine tags with their knob values,
never a serialized plan (cuDNN gives no guarantee for those across devices or versions).

Errors opening the store (a corrupt file, a newer schema, no permission) are StoreError,
which names the file; the CLI then goes on without the store.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import asdict
from typing import Dict, List, Optional, Sequence

from ..core.errors import ExplorerError, UserError
from ..core.files import cache_home
from ..core.options import ExploreOptions
from ..core.problem import DIRECTIONS, ConvProblem
from ..core.records import DirectionResult
from ..core.exploration import Environment, Exploration, Measurement
from ..core.schema import utc_now
from ..core.version import __version__

__all__ = ["Store", "StoreError", "NamedStoreError", "SCHEMA_VERSION", "default_path",
           "env_key", "options_key", "problem_key"]

SCHEMA_VERSION = 3
# Each entry moves a store from version i to i + 1 (index i); version 0 is an empty file.
# An entry is SQL statements, or a function of the connection.
MIGRATIONS: List[Sequence] = [
    ("""CREATE TABLE results (
            id INTEGER PRIMARY KEY,
            problem_key TEXT NOT NULL, direction TEXT NOT NULL, env_key TEXT NOT NULL,
            options_key TEXT NOT NULL, created TEXT NOT NULL, tool_version TEXT NOT NULL,
            gpu_name TEXT NOT NULL, cudnn TEXT NOT NULL, torch TEXT NOT NULL,
            problem_json TEXT NOT NULL, environment_json TEXT NOT NULL,
            measurement_json TEXT NOT NULL, direction_json TEXT NOT NULL,
            UNIQUE (problem_key, direction, env_key, options_key) ON CONFLICT REPLACE)""",
     "CREATE INDEX results_problem ON results (problem_key)",
     "CREATE INDEX results_env ON results (env_key)"),
    # 1 -> 2: the cudnn-frontend version joins the environment key; results stored before
    # it get "" (not known), so they never answer for a build whose version is known.
    (lambda db: _rekey_environments(db),),
    # 2 -> 3: PyTorch's own runs of whole models, one row per mode (model/run_modes.py)
    ("""CREATE TABLE model_runs (
            id INTEGER PRIMARY KEY,
            run_key TEXT NOT NULL, env_key TEXT NOT NULL, created TEXT NOT NULL,
            tool_version TEXT NOT NULL, gpu_name TEXT NOT NULL, model TEXT NOT NULL,
            mode TEXT NOT NULL, environment_json TEXT NOT NULL, run_json TEXT NOT NULL,
            per_problem_json TEXT NOT NULL,
            UNIQUE (run_key, env_key) ON CONFLICT REPLACE)""",),
]
assert len(MIGRATIONS) == SCHEMA_VERSION

_ENV_FIELDS = ("gpu_name", "compute_capability", "sm_count", "cuda_driver", "cuda_runtime",
               "torch_cuda", "cudnn_runtime", "torch_version", "cudnn_frontend")


def _rekey_environments(db) -> None:
    """Recompute every row's env_key from its stored environment (today's fields)."""
    rows = db.execute("SELECT id, environment_json FROM results").fetchall()
    for rid, ej in rows:
        e = Environment.from_dict(json.loads(ej), "stored environment")
        db.execute("UPDATE results SET env_key = ? WHERE id = ?", (env_key(e), rid))


class StoreError(ExplorerError):
    """The store cannot be used (exit 3: the machine's file, not the user's input)."""

    exit_code = 3


class NamedStoreError(StoreError, UserError):
    """A store the user named (--store PATH) that is no results store: a file of something
    else, or a folder. Exit 2: the user's file, as a missing one is."""

    exit_code = 2


def default_path() -> str:
    return os.path.join(cache_home(), "results.db")


def problem_key(p: ConvProblem) -> str:
    return json.dumps(p.to_dict(), sort_keys=True, separators=(",", ":"))


def env_key(e: Environment) -> str:
    d = asdict(e)
    return json.dumps({k: d.get(k, "") for k in _ENV_FIELDS}, sort_keys=True,
                      separators=(",", ":"))


def options_key(o: ExploreOptions) -> str:
    d = o.to_dict()
    for k in ("directions", "device"):
        d.pop(k, None)
    if not d.get("staged"):  # the keys stored before the staged search existed stay valid
        d.pop("staged", None)
    for k in ("every_candidate_mode", "every_math_type"):  # those before these existed
        if d.get(k, True):
            d.pop(k, None)
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


class Store:
    """One SQLite store. Use as a context manager, or call close()."""

    def __init__(self, path: str, named: bool = False):
        """Open (or create) the store at ``path``. ``named``: the user named it, so a file
        that is no store (or a folder) is their mistake, NamedStoreError (exit 2); a locked
        or unreadable one stays the machine's, StoreError (exit 3)."""
        self.path = path
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.db = sqlite3.connect(path, timeout=60.0, isolation_level=None)
            self.db.execute("PRAGMA busy_timeout = 60000")
            self._refuse_other_databases(named)
            # Note [opening together]: several processes opening a new store at once (the
            # ranks of a torchrun sweep) can find it locked while one of them switches it
            # to WAL, which the busy timeout does not cover: try again for a minute.
            deadline = time.monotonic() + 60.0
            while True:
                try:
                    mode = self.db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                    break
                except sqlite3.OperationalError as e:
                    if "locked" not in str(e) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"journal mode {mode}, not WAL")
            self._migrate()
        except sqlite3.DatabaseError as e:
            if named and (os.path.isdir(path) or not isinstance(e, sqlite3.OperationalError)):
                what = "a folder" if os.path.isdir(path) else str(e)
                raise NamedStoreError(f"results store '{path}': {what}; valid: a results "
                                      f"store that cudnn_explorer wrote") from None
            raise StoreError(f"results store '{path}': {e}") from None
        except OSError as e:
            raise StoreError(f"results store '{path}': {e.strerror}") from None

    def _refuse_other_databases(self, named: bool) -> None:
        """Another program's SQLite file is left as it was (no WAL switch, no tables
        added): refused, the user's mistake where they named it."""
        tables = {r[0] for r in self.db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        try:
            ours = "meta" in tables and self.db.execute(
                "SELECT 1 FROM meta WHERE key = 'schema_version'").fetchone() is not None
        except sqlite3.OperationalError:  # a meta table of another shape
            ours = False
        if tables and not ours:
            self.db.close()
            kind = NamedStoreError if named else StoreError
            raise kind(f"results store '{self.path}': an SQLite database of something else "
                       f"(tables {', '.join(sorted(tables))[:60]}); valid: a results store "
                       f"that cudnn_explorer wrote")

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    def _migrate(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait
        try:
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            try:
                version = int(row[0]) if row else 0
            except (TypeError, ValueError):
                raise StoreError(f"results store '{self.path}': schema version "
                                 f"{str(row[0])[:40]!r} is not a number: not a store this "
                                 f"tool wrote; use another --store") from None
            if version > SCHEMA_VERSION:
                raise StoreError(f"results store '{self.path}': schema version {version} is "
                                 f"newer than this cudnn_explorer reads ({SCHEMA_VERSION}); "
                                 f"upgrade cudnn_explorer or use another --store")
            for v in range(version, SCHEMA_VERSION):
                for step in MIGRATIONS[v]:
                    if callable(step):
                        try:
                            step(self.db)
                        except (ExplorerError, ValueError) as e:
                            raise StoreError(f"results store '{self.path}': migrating from "
                                             f"schema version {v}: {e}") from None
                    else:
                        self.db.execute(step)
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                            (str(SCHEMA_VERSION),))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ writing
    def save(self, problem: ConvProblem, env: Environment, options: ExploreOptions,
             measurement: Measurement, d: DirectionResult, created: str = "") -> None:
        """One finished direction, at once (its own transaction): a run killed later keeps
        it."""
        created = created or utc_now()
        try:
            self.db.execute(
                "INSERT INTO results (problem_key, direction, env_key, options_key, created, "
                "tool_version, gpu_name, cudnn, torch, problem_json, environment_json, "
                "measurement_json, direction_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (problem_key(problem), d.direction, env_key(env), options_key(options), created,
                 __version__, env.gpu_name, env.cudnn_runtime, env.torch_version,
                 json.dumps(problem.to_dict()), json.dumps(asdict(env)),
                 json.dumps(asdict(measurement)), json.dumps(d.to_dict())))
        except sqlite3.DatabaseError as e:
            raise StoreError(f"results store '{self.path}': cannot save: {e}") from None

    # ------------------------------------------------------------------ reading
    def lookup(self, problem: ConvProblem, env: Environment, options: ExploreOptions,
               partial: bool = False) -> Optional[Exploration]:
        """The stored exploration of ``problem`` with exactly these options in this
        environment, when every direction asked for is there; with ``partial``, the
        directions that are there (an interrupted run's); None when none is."""
        rows = self.db.execute(
            "SELECT direction, created, measurement_json, direction_json, tool_version "
            "FROM results WHERE problem_key = ? AND env_key = ? AND options_key = ?",
            (problem_key(problem), env_key(env), options_key(options))).fetchall()
        by_dir = {r[0]: r for r in rows}
        have = [d for d in options.directions if d in by_dir]
        if not have or (len(have) < len(options.directions) and not partial):
            return None
        try:
            dirs = [DirectionResult.from_dict(json.loads(by_dir[d][3]), f"stored {d}")
                    for d in have]
            measurement = Measurement.from_dict(json.loads(by_dir[have[0]][2]),
                                                "stored measurement")
        except (ExplorerError, ValueError) as e:
            raise StoreError(f"results store '{self.path}': a stored result does not load: "
                             f"{e}") from None
        return Exploration(problem=problem, environment=env, directions=dirs,
                           tool_version=by_dir[have[0]][4],
                           created=min(by_dir[d][1] for d in have), measurement=measurement)

    def history(self, limit: int = 200) -> List[Dict[str, str]]:
        """Stored results, newest first: one row per problem, environment and options."""
        rows = self.db.execute(
            "SELECT MAX(created), gpu_name, cudnn, torch, problem_json, "
            "GROUP_CONCAT(direction, ','), options_key FROM results "
            "GROUP BY problem_key, env_key, options_key ORDER BY MAX(created) DESC LIMIT ?",
            (limit,)).fetchall()
        return [dict(created=r[0], gpu=r[1], cudnn=r[2], torch=r[3],
                     problem=ConvProblem.from_dict(json.loads(r[4])).describe(),
                     directions=r[5], options=r[6]) for r in rows]

    def results(self) -> List[tuple]:
        """Every stored direction as (problem, environment, DirectionResult, created)."""
        out = []
        for pj, ej, dj, created in self.db.execute(
                "SELECT problem_json, environment_json, direction_json, created FROM results "
                "ORDER BY id"):
            try:
                out.append((ConvProblem.from_dict(json.loads(pj)),
                            Environment.from_dict(json.loads(ej), "stored environment"),
                            DirectionResult.from_dict(json.loads(dj), "stored direction"),
                            created))
            except (ExplorerError, ValueError) as e:
                raise StoreError(f"results store '{self.path}': a stored result does not "
                                 f"load: {e}") from None
        return out

    def explorations(self) -> List[Exploration]:
        """Every stored measurement as an Exploration: the directions of one problem
        measured in one environment with the same options, oldest first."""
        groups: Dict[tuple, list] = {}
        for row in self.db.execute(
                "SELECT problem_key, env_key, options_key, problem_json, environment_json, "
                "measurement_json, direction_json, created, tool_version FROM results "
                "ORDER BY id"):
            groups.setdefault(row[:3], []).append(row[3:])
        out = []
        for rows in groups.values():
            try:
                dirs = sorted((DirectionResult.from_dict(json.loads(r[3]), "stored direction")
                               for r in rows), key=lambda d: DIRECTIONS.index(d.direction))
                out.append(Exploration(
                    problem=ConvProblem.from_dict(json.loads(rows[0][0])),
                    environment=Environment.from_dict(json.loads(rows[0][1]),
                                                      "stored environment"),
                    directions=dirs, tool_version=rows[0][5],
                    created=min(r[4] for r in rows),
                    measurement=Measurement.from_dict(json.loads(rows[0][2]),
                                                      "stored measurement")))
            except (ExplorerError, ValueError) as e:
                raise StoreError(f"results store '{self.path}': a stored result does not "
                                 f"load: {e}") from None
        return sorted(out, key=lambda e: e.created)

    def save_model_run(self, run_key: str, env: Environment, model: str, mode: str,
                       run: dict, per_problem: dict, created: str = "") -> None:
        """One mode's run of a model (ModelModeRun as a dict) and its per-problem results
        (problem key -> the child's result for it, log included), at once."""
        created = created or utc_now()
        try:
            self.db.execute(
                "INSERT INTO model_runs (run_key, env_key, created, tool_version, gpu_name, "
                "model, mode, environment_json, run_json, per_problem_json) "
                "VALUES (?,?,?,?,?,?,?,?,?,?)",
                (run_key, env_key(env), created, __version__, env.gpu_name, model, mode,
                 json.dumps(asdict(env)), json.dumps(run), json.dumps(per_problem)))
        except sqlite3.DatabaseError as e:
            raise StoreError(f"results store '{self.path}': cannot save: {e}") from None

    def lookup_model_run(self, run_key: str, env: Environment) -> Optional[tuple]:
        """(run dict, per-problem dict, created) of a stored mode's run, or None."""
        row = self.db.execute(
            "SELECT run_json, per_problem_json, created FROM model_runs WHERE run_key = ? AND "
            "env_key = ?", (run_key, env_key(env))).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0]), json.loads(row[1]), row[2]
        except ValueError as e:
            raise StoreError(f"results store '{self.path}': a stored model run does not "
                             f"load: {e}") from None

    def model_runs(self, limit: int = 200) -> List[Dict[str, str]]:
        """Stored runs of models, newest first: when, on which GPU, which model, which mode."""
        rows = self.db.execute(
            "SELECT created, gpu_name, model, mode FROM model_runs ORDER BY created DESC, "
            "id DESC LIMIT ?", (limit,)).fetchall()
        return [dict(created=r[0], gpu=r[1], model=r[2], mode=r[3]) for r in rows]

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
