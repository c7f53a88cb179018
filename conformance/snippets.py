"""Source snippets shared by the tests; each is executed by the suite and pasted into reproducers.

What differs by device (how to synchronize) is generated from the registry, devices.py.
"""

from cpugpu_conformance import devices

# Defined in every scenario that reads or writes contents: works for every dtype,
# float8 and sub-byte ones included, by treating elements as bytes.
BYTE_HELPERS = '''
def raw(t):
    """The bytes of a contiguous tensor of any dtype, as a host uint8 array (one row per element)."""
    size = t.element_size()
    flat = torch.empty(0, dtype=torch.uint8, device=t.device)
    flat.set_(t.untyped_storage(), t.storage_offset() * size, (t.numel() * size,))
    return flat.cpu().numpy().reshape(*t.shape, size).copy()


def fill_bytes(t, seed):
    """Overwrite every byte of `t` in place with a pattern that depends on `seed`.

    The pattern repeats every 251 bytes, so a buffer of millions of bytes costs one tiled copy.
    """
    view = t.view(torch.uint8)
    period = ((torch.arange(251) * 7 + seed * 31 + 1) % 251 + 1).to(torch.uint8)
    if t.dtype == torch.bool:
        period = period % 2  # any other byte is not a valid bool
    pattern = period.repeat(view.numel() // 251 + 1)[: view.numel()]
    view.copy_(pattern.reshape(view.shape).to(view.device))


def sync():
    """Non-blocking copies have landed only once the stream is synchronized."""
''' + devices.per_device(lambda d: d.sync)

CONSTRUCT = "Buffer(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)"
