"""The conformance suite. Its modules import each other relatively (``from . import checks``):
the wheel ships this folder as ``cpugpu_conformance.suite`` for ``cpugpu-conformance run``,
and a checkout runs it as ``pytest conformance``."""
