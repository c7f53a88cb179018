"""cpugpu-conformance: does the installed torch still honour the CpuGpuBuffer contract?"""

__version__ = "0.1.0"
