"""What the matrix machinery costs, against baselines measured in the same run.

    python benchmarks/bench_matrix.py [--release 2.13.0] [--repeat 3] [--cold-matrix]
    python benchmarks/bench_matrix.py --skip-warm --releases 2.0.1,2.13.0,2.15.0 [--cold 2.13.0]
                                      [--cpu-wheels /opt/wheels | --cpu-index https://download.pytorch.org/whl/cpu]

(a) a cell whose environment exists: `nox -t torch-X` minus the same pytest command run
    directly in that environment (the overhead: nox, uv's check, the torch probe, the
    result handling, the summary). Target: under 3 s.
(b) creating a cell's environment when uv's cache holds its wheels: the cell's own
    create + install (torch, numpy, the project) against a bare `uv venv` plus
    `uv pip install torch numpy`. Target: under 3 s.
(c) disk: uv's cache plus .nox/, counted once (cell environments are hard links into
    the cache, so .nox/ adds little).
(d) --cold-matrix: the whole default matrix with an empty uv cache (a private one, so
    other work on this machine keeps its cache) and fresh environments; prints the wall
    time and the disk it took, then deletes it (--keep to look at it). Before it, in the
    same run, the bare side: uv venv + uv pip install + import torch of every release,
    from its own empty cache (deleted before the matrix starts, so one cache at a time);
    the ratio is (matrix - the suites' own time) / bare. Targets: 15 min; ratio 1.30.
    --warm-matrix: the same from uv's own cache, which must hold the wheels (new
    environments, both sides).
(e) --releases A,B,C: per release, what a cell adds to the bare minimum. Bare: `uv venv`,
    `uv pip install torch==X numpy...` (the release's own pins), `python -c "import torch"`.
    Cell: `nox -t torch-X` in a new environment (create, install torch, numpy and the
    project, probe, run the suite, write the result) minus the suite's test time (the
    result's duration_s). Ratio cell/bare; target: at most 1.30. Warm: uv's own cache,
    populated first (the disk each release adds to it is printed). --cold X: the same
    for one release, each side with its own empty cache under /tmp, deleted right after
    (never two full caches at once); prints each cache's size, i.e. a release's disk.
    --cpu-wheels DIR / --cpu-index URL: a cold install of the CPU-only build of --cold's
    release (torch==X+cpu) from a wheel folder or index, its time and cache size.
(f) --parallel A,B,C,D: the warm matrix of those releases with `cpugpu-conformance matrix
    --jobs 2` against `--jobs 1`, measured in the same run: the cells' environments are made
    by a first, unmeasured run (uv's cache must hold their wheels), then each is timed
    --repeat times, interleaved, in alternating order. --parallel-promise chooses the suite
    subset (default 1,2,3,4,5). Prints the speed-up (jobs 1 / jobs 2) and the load average
    before and after. Target: at least 1.6 on two cores.

Run it on an idle machine: the figures are wall times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cpugpu_conformance import results  # noqa: E402
from cpugpu_conformance.report import summary  # noqa: E402
from cpugpu_conformance.runner import install as installing  # noqa: E402
from cpugpu_conformance.runner import matrix  # noqa: E402

PYTEST_ARGS = ["--promise", "1"]  # the overhead does not depend on how much the suite tests


def the_matrix() -> matrix.Matrix:
    """The matrix nox runs: $CONFORMANCE_MATRIX, else matrix.yaml."""
    return matrix.load(os.environ.get("CONFORMANCE_MATRIX") or ROOT / "matrix.yaml")


def nox_cmd() -> list[str]:
    found = shutil.which("nox")
    return [found] if found else [sys.executable, "-m", "nox"]


def timed(cmd: list[str], env: dict[str, str] | None = None, quiet: bool = True) -> float:
    started = time.perf_counter()
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=out, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {proc.returncode}")
    return elapsed


def du_bytes(*paths: Path) -> int:
    """Disk used by the paths together; a file hard-linked from several of them counts once."""
    existing = [str(p) for p in paths if p.exists()]
    if not existing:
        return 0
    out = subprocess.run(["du", "-s", "-B1", "-c", *existing], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def uv_cache_dir(env: dict[str, str] | None = None) -> Path:
    out = subprocess.run(["uv", "cache", "dir"], capture_output=True, text=True, check=True, env=env).stdout
    return Path(out.strip())


def cell_overhead(release: str, repeat: int, workdir: Path) -> None:
    env = dict(os.environ, CONFORMANCE_RESULTS=str(workdir / "results"))
    envdir = workdir / "nox"
    tag = f"torch-{release}"
    nox_run = [*nox_cmd(), "--envdir", str(envdir), "-t", tag, "--", *PYTEST_ARGS]
    timed(nox_run, env)  # makes the environment; not measured
    [venv] = [p for p in envdir.iterdir() if p.is_dir() and "conformance" in p.name]
    m = the_matrix()
    direct = [str(installing.env_python(venv)), "-m", "pytest", "conformance", "--cell-result", str(workdir / "direct.json"),
              "--cell-name", "direct", "--hypothesis-profile", m.hypothesis_profile, "-p", "no:cacheprovider",
              "--device", "cpu", *PYTEST_ARGS]
    with_cell, bare = [], []
    for _ in range(repeat):  # interleaved, so drift in machine load hits both alike
        with_cell.append(timed(nox_run, env))
        bare.append(timed(direct, env))
    a, b = statistics.median(with_cell), statistics.median(bare)
    print(f"(a) cell with its environment: nox -t {tag} {a:.2f} s, the same pytest run directly {b:.2f} s "
          f"(medians of {repeat}): overhead {a - b:.2f} s, ratio {a / b:.2f} (target: overhead < 3 s)")


def env_creation(release: str, repeat: int, workdir: Path) -> None:
    m = the_matrix()
    rel = m.release(release)
    uv = installing.find_uv() or "uv"
    ours, bare = [], []
    for i in range(repeat):
        target = workdir / f"bare-{i}"
        started = time.perf_counter()
        subprocess.run([uv, "venv", "-q", "--python", m.python, str(target)], check=True)
        subprocess.run([uv, "pip", "install", "-q", "--python", str(installing.env_python(target)), f"torch=={release}", "numpy"],
                       check=True)
        bare.append(time.perf_counter() - started)

        target = workdir / f"cell-{i}"
        started = time.perf_counter()
        python = installing.create_env(target, m.python)
        done = installing.install(python, rel, index_url=m.index_url, project=ROOT)
        ours.append(time.perf_counter() - started)
        if not done.ok:
            raise SystemExit(done.error())
    a, b = statistics.median(ours), statistics.median(bare)
    linked = du_bytes(uv_cache_dir(), workdir / "cell-0") - du_bytes(uv_cache_dir())
    print(f"(b) new cell environment from a warm cache: {a:.2f} s, bare uv venv + uv pip install torch numpy {b:.2f} s "
          f"(medians of {repeat}): ratio {a / b:.2f} (target: < 3 s); it adds {linked / 1e6:.0f} MB beyond the cache "
          f"(apparent size {gb(du_bytes(workdir / 'cell-0'))})")


def disk() -> None:
    cache, nox_dir = uv_cache_dir(), ROOT / ".nox"
    both, alone = du_bytes(cache, nox_dir), du_bytes(nox_dir)
    print(f"(c) disk: uv cache + .nox/ = {gb(both)} (uv cache {gb(du_bytes(cache))}; .nox/ alone would be {gb(alone)}, "
          f"adds {gb(both - du_bytes(cache))} because its environments link to the cache)")


def whole_matrix(workdir: Path, keep: bool, cold: bool) -> None:
    """(d): a bare install + import of every release of the matrix, then the matrix itself, in
    the same run. Cold: each side from its own empty uv cache (one cache on disk at a time);
    warm: both from uv's own cache, which must hold the wheels already."""
    m = the_matrix()
    releases = list(dict.fromkeys(c.torch for c in m.cells if c.device.name == "cpu"))
    state = "cold" if cold else "warm"
    bare_cache = workdir / "uv-cache-bare" if cold else uv_cache_dir()
    bare_env = dict(os.environ, UV_CACHE_DIR=str(bare_cache))
    print(f"(d) bare side, {state}: uv venv + uv pip install + import torch, {len(releases)} releases:", flush=True)
    bare = {}
    for release in releases:
        bare[release] = bare_install(release, workdir, bare_env)
        print(f"  torch {release}: {bare[release]:.1f} s" + (f" (cache now {gb(du_bytes(bare_cache))})" if cold else ""),
              flush=True)
    bare_total = sum(bare.values())
    bare_disk = du_bytes(bare_cache) if cold else 0
    if cold:
        shutil.rmtree(bare_cache, ignore_errors=True)

    cache, envdir, out = (workdir / "uv-cache" if cold else uv_cache_dir()), workdir / "nox", workdir / "results"
    env = dict(os.environ, UV_CACHE_DIR=str(cache), CONFORMANCE_RESULTS=str(out))
    started = time.perf_counter()
    proc = subprocess.run([*nox_cmd(), "--envdir", str(envdir), "-s", "conformance"], cwd=ROOT, env=env, check=False)
    elapsed = time.perf_counter() - started
    rows = summary.summarize(out)
    print(summary.format_summary(rows))
    suite = sum(r.duration_s or 0.0 for r in rows)
    disk = (f"disk {gb(du_bytes(cache, envdir))} (uv cache {gb(du_bytes(cache))}, environments add "
            f"{gb(du_bytes(cache, envdir) - du_bytes(cache))}, apparent {gb(du_bytes(envdir))})")
    print(f"(d) whole default matrix, {state} cache, new environments: {elapsed / 60:.1f} min for {len(rows)} cells "
          f"(nox exit {proc.returncode}" + ("; target 15 min); " + disk if cold else ")"))
    print(f"(d) bare install + import of the same {len(releases)} releases, {state}: {bare_total / 60:.1f} min"
          + (f", cache {gb(bare_disk)}" if cold else "") + f"; matrix {elapsed:.0f} s - the suites' own {suite:.0f} s "
          f"= {elapsed - suite:.0f} s; ratio {(elapsed - suite) / bare_total:.2f} (target <= 1.30)", flush=True)
    if keep:
        print(f"kept in {workdir}")


def fresh_dir(workdir: Path, name: str) -> Path:
    path = workdir / name
    shutil.rmtree(path, ignore_errors=True)
    return path


def bare_install(release: str, workdir: Path, env: dict[str, str], extra: list[str] | None = None,
                 requirements: list[str] | None = None) -> float:
    """uv venv + uv pip install torch==X numpy... + import torch, in a new environment; seconds."""
    m = the_matrix()
    uv = installing.find_uv() or "uv"
    target = fresh_dir(workdir, "bare")
    python = str(installing.env_python(target))
    started = time.perf_counter()
    subprocess.run([uv, "venv", "-q", "--python", m.python, str(target)], check=True, env=env)
    subprocess.run([uv, "pip", "install", "-q", "--python", python, *(requirements or m.release(release).requirements()),
                    *(extra or [])], check=True, env=env)
    subprocess.run([python, "-c", "import torch"], check=True, env=env)
    elapsed = time.perf_counter() - started
    shutil.rmtree(target, ignore_errors=True)
    return elapsed


def cell_run(release: str, workdir: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """`nox -t torch-X` in a new environment: (wall seconds, the suite's own seconds, the cell's answer)."""
    out, envdir = fresh_dir(workdir, "results"), fresh_dir(workdir, "nox")
    env = dict(env, CONFORMANCE_RESULTS=str(out))
    started = time.perf_counter()
    subprocess.run([*nox_cmd(), "--envdir", str(envdir), "-t", f"torch-{release}", "--", *PYTEST_ARGS], cwd=ROOT, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - started
    result = results.CellResult.load(out / f"{matrix.cell_name(release, 'cpu')}.json")
    shutil.rmtree(envdir, ignore_errors=True)
    return elapsed, float(result.get("duration_s") or 0.0), result.describe()


def _ratio_line(label: str, bare: float, total: float, suite: float, answer: str) -> str:
    overhead = total - suite
    return (f"  {label}: bare install+import {bare:.1f} s; cell {total:.1f} s - suite {suite:.1f} s = {overhead:.1f} s; "
            f"ratio {overhead / bare:.2f} (target <= 1.30) [{answer}]")


def warm_ratios(releases: list[str], repeat: int, workdir: Path) -> None:
    env = dict(os.environ)
    cache = uv_cache_dir()
    print(f"(e) cells against a bare install + import torch, warm cache ({cache}), medians of {repeat}:", flush=True)
    for release in releases:
        before = du_bytes(cache)
        warm_up = bare_install(release, workdir, env)  # fills the cache when the release is new to it
        added = du_bytes(cache) - before
        print(f"  torch {release}: first install {warm_up:.1f} s, added {gb(added)} to the cache", flush=True)
        bare, total, suite = [], [], []
        answer = ""
        for _ in range(repeat):  # interleaved, so drift in machine load hits both alike
            bare.append(bare_install(release, workdir, env))
            t, s, answer = cell_run(release, workdir, env)
            total.append(t)
            suite.append(s)
        print(_ratio_line(f"torch {release} warm", statistics.median(bare), statistics.median(total),
                          statistics.median(suite), answer), flush=True)
    print(f"  uv cache now {gb(du_bytes(cache))}", flush=True)


def cold_ratio(release: str, workdir: Path) -> None:
    """Each side with its own empty cache, made and deleted in turn."""
    print(f"(e) cold cache, torch {release} (one private cache at a time, deleted after):", flush=True)
    sizes = {}
    for side in ("bare", "cell"):
        cache = fresh_dir(Path(tempfile.gettempdir()), f"bench-uv-cache-{side}")
        env = dict(os.environ, UV_CACHE_DIR=str(cache))
        try:
            if side == "bare":
                bare = bare_install(release, workdir, env)
            else:
                total, suite, answer = cell_run(release, workdir, env)
            sizes[side] = du_bytes(cache)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    print(_ratio_line(f"torch {release} cold", bare, total, suite, answer))
    print(f"  cache after the bare install {gb(sizes['bare'])}, after the cell {gb(sizes['cell'])} "
          f"(the cell adds the project and its test dependencies)", flush=True)


def cpu_only(release: str, workdir: Path, wheels: str | None, index_url: str | None) -> None:
    """A cold install of the CPU-only build, from a wheel folder or the CPU index."""
    cache = fresh_dir(Path(tempfile.gettempdir()), "bench-uv-cache-cpu")
    env = dict(os.environ, UV_CACHE_DIR=str(cache))
    source = ["--find-links", wheels] if wheels else ["--extra-index-url", str(index_url)]
    requirements = [f"torch=={release}+cpu", *the_matrix().release(release).requirements()[1:]]
    try:
        seconds = bare_install(release, workdir, env, extra=source, requirements=requirements)
        size = du_bytes(cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    wheel = sorted(Path(wheels).glob(f"torch-{release}+cpu-*.whl")) if wheels else []
    file_size = f", the wheel file {wheel[0].stat().st_size / 1e6:.0f} MB" if wheel else ""
    print(f"(e) CPU-only torch {release}+cpu, cold ({' '.join(source)}): bare install+import {seconds:.1f} s, "
          f"cache {gb(size)}{file_size}", flush=True)


def matrix_run(releases: list[str], jobs: int, workdir: Path, promise: str) -> float:
    """`cpugpu-conformance matrix --jobs N` over the releases' cells; wall seconds. A cell that is not
    clean is a verdict, not a failed measurement; anything else (exit 2, a signal) stops the benchmark."""
    out = workdir / f"results-{jobs}"
    cmd = [sys.executable, "-m", "cpugpu_conformance", "matrix", "--jobs", str(jobs), *[f"torch-{r}" for r in releases],
           "--envdir", str(workdir / "envs"), "--results", str(out), "--", "--promise", promise]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("CONFORMANCE_MATRIX", None)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"bench: {' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    unfinished = [f"{r.cell}: {r.why}" for r in summary.summarize(out) if not r.clean and r.answer not in ("failed", "untested")]
    if unfinished:
        raise SystemExit("bench: a cell did not run to the end: " + "; ".join(unfinished))
    return elapsed


def parallel_speedup(releases: list[str], repeat: int, workdir: Path, promise: str) -> None:
    load_before = os.getloadavg()
    warm_up = matrix_run(releases, 2, workdir, promise)  # makes the environments; not measured
    one, two = [], []
    for i in range(repeat):  # alternating order, so drift in machine load hits both alike
        order = (1, 2) if i % 2 == 0 else (2, 1)
        for jobs in order:
            (one if jobs == 1 else two).append(matrix_run(releases, jobs, workdir, promise))
    a, b = statistics.median(one), statistics.median(two)
    load_after = os.getloadavg()
    print(f"(f) warm matrix of {len(releases)} cells ({', '.join(releases)}; --promise {promise}), medians of {repeat}: "
          f"--jobs 1 {a:.1f} s, --jobs 2 {b:.1f} s: speed-up {a / b:.2f} (target >= 1.6; first run, making the "
          f"environments, {warm_up:.1f} s); load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"({os.cpu_count()} CPUs)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default="2.13.0", help="torch release of the warm-cache measurements")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cold-matrix", action="store_true", help="also run the whole matrix from an empty cache (minutes, GBs)")
    parser.add_argument("--warm-matrix", action="store_true",
                        help="the whole matrix in new environments from uv's own (warm) cache, against bare installs")
    parser.add_argument("--keep", action="store_true", help="keep the cold run's cache, environments and results")
    parser.add_argument("--skip-warm", action="store_true", help="skip (a), (b) and (c)")
    parser.add_argument("--releases", help="(e): comma-separated releases to compare with a bare install, warm cache")
    parser.add_argument("--cold", metavar="RELEASE", help="(e): the same for one release from empty caches (GBs of download)")
    parser.add_argument("--cpu-wheels", metavar="DIR", help="(e): a folder with torch-<--cold>+cpu wheel, installed cold")
    parser.add_argument("--cpu-index", metavar="URL", help="(e): the CPU-only index to take torch-<--cold>+cpu from, cold")
    parser.add_argument("--parallel", metavar="A,B,C,D", help="(f): releases of the warm matrix, --jobs 2 against --jobs 1")
    parser.add_argument("--parallel-promise", default="1,2,3,4,5", help="(f): the suite subset each cell runs")
    args = parser.parse_args()
    try:
        the_matrix()
    except matrix.MatrixError as exc:
        raise SystemExit("\n".join(exc.lines)) from None
    workdir = Path(tempfile.mkdtemp(prefix="bench-matrix-", dir=os.environ.get("BENCH_TMP")))
    try:
        if not args.skip_warm:
            cell_overhead(args.release, args.repeat, workdir / "a")
            env_creation(args.release, args.repeat, workdir / "b")
            disk()
        if args.releases:
            warm_ratios(args.releases.split(","), args.repeat, workdir / "e")
        if args.cold:
            cold_ratio(args.cold, workdir / "e")
            if args.cpu_wheels or args.cpu_index:
                cpu_only(args.cold, workdir / "e", args.cpu_wheels, args.cpu_index)
        if args.warm_matrix:
            whole_matrix(workdir / "d-warm", args.keep, cold=False)
        if args.cold_matrix:
            whole_matrix(workdir / "d", args.keep, cold=True)
        if args.parallel:
            parallel_speedup(args.parallel.split(","), args.repeat, workdir / "f", args.parallel_promise)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
