"""Classes whose constructor cannot take the contract's arguments: a usage error, not a test failure."""


class PositionalFlags:
    def __init__(self, size, dtype, device):
        pass


class NoDevice:
    def __init__(self, *size, dtype, pin_memory, with_numpy=True):
        pass


NOT_A_CLASS = 42
