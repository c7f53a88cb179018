"""cpugpu-conformance: does the installed torch still honour the CpuGpuBuffer contract?

    promises, devices, reference, variants, impl, observe   the contract, its devices, the fixed
                                                           class, broken ones, --impl, torch probes
    testing    the suite as a library of pytest test classes (and the plugin)
    runner     matrix.yaml -> one result file per cell (install, run, bisect)
    results    the one result type: CellResult, the verdict rule, the diff, safe files
    report     result files -> compat/ (the matrix, the changelog), the summary, the gate
    cli        ``cpugpu-conformance COMMAND``: one module per command, ExitCode
    mutation   the suite's mutation score (``python -m cpugpu_conformance.mutation``)
"""

__version__ = "0.1.0"
