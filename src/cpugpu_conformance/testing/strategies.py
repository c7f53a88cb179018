"""The strategies the library's tests draw from, under their public name (docs/library.md):
``from cpugpu_conformance.testing import strategies``. They live with what both kinds of test
share, in shared/strategies.py."""

from .shared.strategies import *  # noqa: F403
from .shared.strategies import __all__  # noqa: F401
