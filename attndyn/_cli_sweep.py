"""``attndyn sweep SPEC.toml``: run a parameter sweep described by a spec file.

The spec is untrusted input, read as TOML data and checked against a whitelist::

    function = "compare"          # one of: compare, sgd, integrate, bounds
    seed = 0                      # root seed: point i gets SeedSequence(seed).spawn(n)[i]
    zipped = false                # zip the lists instead of taking their product

    [fixed]                       # keyword arguments shared by every point
    d = 40
    eta = 0.005

    [grid]                        # keyword arguments swept
    loss = ["mse:h1,h1", "mse:h2,h2"]
    order = [2, 4]

Finished points are stored in ``--out`` as they complete; running the same command again
resumes an interrupted sweep.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import stat

from attndyn._cli_common import LIMITS, check_size, print_json

__all__ = ["add_arguments", "run", "read_spec"]

MAX_SPEC_BYTES = 1_000_000
_TOP_KEYS = {"function", "seed", "zipped", "fixed", "grid"}


def add_arguments(command_name: str, p) -> None:
    p.add_argument("spec", help="the sweep spec (TOML): function, seed, zipped, [fixed], [grid]")
    p.add_argument("--out", default=None,
                   help="folder for the finished points (default: the spec's name + '.sweep'); "
                        "an interrupted sweep resumes from it")
    p.add_argument("--scheduler", default=None,
                   help="address of a dask.distributed scheduler (tcp://host:8786); default: a "
                        "local process pool")
    p.add_argument("--workers", type=int, default=None,
                   help=f"processes of the local pool, 1..{LIMITS['workers'][1]} (default: the "
                        "cores)")
    p.add_argument("--max-points", type=int, default=10_000,
                   help=f"refuse grids with more points, 1..{LIMITS['max_points'][1]} "
                        "(default 10000)")
    p.add_argument("--netcdf", default=None,
                   help="also write the sweep as netCDF (xarray, scipy engine) to this file")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (docs/cli.md)")
    p.add_argument("--no-progress", action="store_true", help="never show the progress bar")


def _toml_loads(text: str) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"spec is not valid TOML: {exc}") from None


def _check_value(v, where):
    if isinstance(v, float) and not math.isfinite(v):  # TOML reads nan, inf and 1e400
        raise ValueError(f"spec {where}: numbers must be finite, got {v}")
    if isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [_check_value(x, where) for x in v]
    raise ValueError(f"spec {where}: values must be numbers, strings, booleans or lists, "
                     f"got {type(v).__name__}")


def read_spec(path) -> dict:
    """Parse and validate a sweep spec file; returns ``{function, seed, zipped, fixed, grid}``."""
    from attndyn._sweep_tasks import task_signature
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ValueError(f"cannot read spec {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would block or never end
        raise ValueError(f"spec {path} is not a regular file")
    size = st.st_size
    if size > MAX_SPEC_BYTES:
        raise ValueError(f"spec {path} is {size} bytes, above the limit of {MAX_SPEC_BYTES}")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read spec {path}: {exc}") from None
    spec = _toml_loads(text)
    unknown = set(spec) - _TOP_KEYS
    if unknown:
        raise ValueError(f"spec: unknown keys {', '.join(sorted(unknown))}; allowed: "
                         f"{', '.join(sorted(_TOP_KEYS))}")
    if "function" not in spec or not isinstance(spec["function"], str):
        raise ValueError("spec: 'function' (a string) is required")
    params = task_signature(spec["function"])
    seed = spec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"spec: seed must be an int >= 0, got {seed!r}")
    zipped = spec.get("zipped", False)
    if not isinstance(zipped, bool):
        raise ValueError(f"spec: zipped must be true or false, got {zipped!r}")
    out = {"function": spec["function"], "seed": seed, "zipped": zipped}
    for table in ("fixed", "grid"):
        t = spec.get(table, {})
        if not isinstance(t, dict):
            raise ValueError(f"spec: [{table}] must be a table")
        for k, v in t.items():
            if k not in params:
                raise ValueError(f"spec [{table}]: {spec['function']} has no parameter {k!r}; "
                                 f"its parameters: {', '.join(sorted(params))}")
            _check_value(v, f"[{table}].{k}")
            if table == "grid" and (not isinstance(v, list) or not v):
                raise ValueError(f"spec [grid].{k} must be a non-empty list")
        out[table] = dict(t)
    both = set(out["fixed"]) & set(out["grid"])
    if both:
        raise ValueError(f"spec: {', '.join(sorted(both))} appear in both [fixed] and [grid]")
    if not out["grid"]:
        raise ValueError("spec: [grid] must name at least one parameter to sweep")
    return out


class _Task:
    """Picklable ``fn(**point, seed=...)`` for a named task with fixed keywords."""

    def __init__(self, name, fixed):
        self.name, self.fixed = name, dict(fixed)
        # what the output folder remembers: resuming with other fixed values is refused
        self.sweep_id = f"attndyn task {name} {json.dumps(self.fixed, sort_keys=True)}"

    def __call__(self, seed=None, **point):
        from attndyn._sweep_tasks import TASKS
        fn = TASKS[self.name]
        kw = {**self.fixed, **point}
        if "seed" in inspect.signature(fn).parameters:
            kw["seed"] = seed
        return fn(**kw)


#: a dask scheduler address: tcp://host:port (or tls://, ws://, wss://, inproc://...)
_ADDRESS = re.compile(r"^(tcp|tls|ws|wss|ucx|inproc)://[A-Za-z0-9_.\-\[\]:/%]+$")


def _client(address: str):
    """A ``distributed.Client`` for ``--scheduler``; a bad or unreachable address is one line."""
    if not _ADDRESS.match(address) or len(address) > 256:
        raise ValueError(f"--scheduler must be a scheduler address such as tcp://host:8786, "
                         f"got {address!r}")
    try:
        from distributed import Client
    except ImportError:
        raise ValueError("--scheduler needs dask.distributed: pip install 'attndyn[dist]'") from None
    try:
        return Client(address, timeout="10s")
    except (OSError, ValueError, TypeError) as exc:  # unreachable, refused, malformed
        raise ValueError(f"--scheduler {address}: cannot connect: "
                         f"{type(exc).__name__}: {exc}") from None


def run(command_name: str, args) -> int:
    from attndyn._sweep import sweep
    check_size(args.workers, "workers")
    check_size(args.max_points, "max-points")
    spec = read_spec(args.spec)
    out = args.out or (os.path.splitext(args.spec)[0] + ".sweep")
    executor = None
    client = None
    if args.scheduler:
        client = executor = _client(args.scheduler)
    try:
        res = sweep(_Task(spec["function"], spec["fixed"]), spec["grid"], seed=spec["seed"],
                    zipped=spec["zipped"], executor=executor, cache_dir=out,
                    workers=args.workers, max_points=args.max_points,
                    progress=False if args.no_progress else None)
    finally:
        if client is not None:
            client.close()
    if args.netcdf:
        res.to_xarray().to_netcdf(args.netcdf, engine="scipy")
    rows = [{"point": p, "status": s, "message": m}
            for p, s, m in zip(res.points, res.status, res.messages)]
    if args.json:
        print_json(command_name, status=0 if res.success else 1,
                   message=(f"{len(res)} points of {spec['function']}; {len(res.failed)} not "
                            "successful"),
                   saved=[out] + ([args.netcdf] if args.netcdf else []),
                   result={"function": spec["function"], "out": out, "n_points": len(res),
                           "failed": res.failed, "points": rows})
    else:
        print(f"sweep: {len(res)} points of {spec['function']} in {out}; "
              f"{len(res.failed)} not successful")
        for i, r in enumerate(rows):
            print(f"  {i:4d}  status {r['status']:3d}  {json.dumps(r['point'])}  {r['message'][:80]}")
    return 0 if res.success else 1
