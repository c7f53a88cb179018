"""The mutation score: how many mutants of a CpuGpuBuffer implementation the conformance suite kills (cosmic-ray).

    score        the outcomes (killed, survived, timeout, ...), Mutant and Equivalent, how cosmic-ray's results read
    equivalents  reading the reviewed equivalents (equivalents.yaml, for the reference), matching them to mutants
    run          Options, run(options, extra): the copy, the baseline, cosmic-ray init and exec
    report       summarize: the report lines and the exit code

Reads the target and equivalents.yaml; writes only in its work directory. The command line,
``python -m cpugpu_conformance.mutation`` (as nox runs it), is cpugpu_conformance.cli.mutation.
"""

from __future__ import annotations

__all__ = ["equivalents", "report", "run", "score"]
