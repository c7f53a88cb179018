"""How many examples a test gets: a share of the loaded hypothesis profile's budget."""

from __future__ import annotations

from hypothesis import settings


def share(divisor: int, floor: int) -> settings:
    """1/divisor of the profile's examples, at least `floor`, as a test decorator.

    For tests whose main axis is a pytest parameter (a creation context, an engine-scale
    size): each parameter needs only a few examples. Called when a test module is
    imported, after hypothesis has loaded the profile chosen on the command line.
    """
    return settings(max_examples=max(floor, settings.default.max_examples // divisor))
