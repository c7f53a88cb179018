"""The copies' `n` reaches the edges of slice semantics by design (shared/strategies.py's slice_end),
so that copy_to_gpu(0), which `if not n` reads as "everything", is caught at the floor: a team's
profile of twenty examples, whatever its seed. Drawn from None and the range alone, 0 on a
non-empty buffer came up in only half such runs (10 of 20 seeds missed ZeroMeansAllBuffer)."""

from __future__ import annotations

import forkserver
import pytest
from hypothesis import Phase, given, seed, settings
from hypothesis import strategies as st
from suite_runner import suite_command, suite_env

from cpugpu_conformance.testing.shared import budget
from cpugpu_conformance.testing.shared import strategies as s

# The fewest examples a whole-budget test may run and still count (budget.py): a team's quick profile.
FLOOR = budget.whole().floor()
# A profile at the floor, random (not derandomized), no database: each seed a run of its own.
FLOOR_PROFILE = f'''
from hypothesis import settings
settings.register_profile("floor", max_examples={FLOOR}, database=None, deadline=None)
'''


@pytest.mark.parametrize("run_seed", [1, 2, 3, 4, 5])
def test_copy_to_gpu_zero_is_caught_at_the_floor_whatever_the_seed(tmp_path, run_seed):
    (tmp_path / "floor_profile.py").write_text(FLOOR_PROFILE)
    cmd = suite_command(tmp_path / "cell.json", "-p", "floor_profile", "--impl",
                        "cpugpu_conformance.variants:ZeroMeansAllBuffer", "--promise", "8", "--device", "cpu",
                        "-k", "test_partial_copy and not engine", f"--hypothesis-seed={run_seed}", profile="floor")
    # From tmp_path, where the profile's module is found (-p); the suite itself is named by its path.
    run = forkserver.run_python(cmd[1:], cwd=tmp_path, env=suite_env(), timeout=300)
    assert run.returncode == 1, f"seed {run_seed}: exit {run.returncode}\n{run.stdout[-3000:]}{run.stderr[-2000:]}"
    assert "copy_to_gpu(n) did not write exactly" in run.stdout or "copy_to_cpu(n) did not write exactly" in run.stdout


def draws(length: int, run_seed: int) -> list[int | None]:
    """What one run of FLOOR examples, seeded, draws from slice_end(length)."""
    drawn: list[int | None] = []

    @seed(run_seed)
    @settings(max_examples=FLOOR, database=None, phases=[Phase.generate], deadline=None)
    @given(st.data())
    def run(data):
        drawn.append(data.draw(s.slice_end(length)))

    run()
    return drawn


@pytest.mark.parametrize("length", [0, 1, 4, 1024])
def test_the_edges_are_drawn_and_nothing_outside_the_checked_range(length):
    seen = {n for run_seed in range(5) for n in draws(length, run_seed)}
    assert {None, 0, length, length + 1, -1, -length} <= seen, sorted(seen, key=str)
    assert all(n is None or -length - 2 <= n <= length + 3 for n in seen), sorted(seen, key=str)
