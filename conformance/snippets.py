"""Source snippets shared by the tests; each is executed by the suite and pasted into reproducers.

What differs by device (how to synchronize) is generated from the registry, devices.py.
"""

from cpugpu_conformance import devices

# Defined in every scenario that reads or writes contents: works for every dtype,
# float8 and sub-byte ones included, by treating elements as bytes.
BYTE_HELPERS = '''
def byte_view(t):
    """A uint8 tensor over t's own memory, one row of element_size() bytes per element.

    Built from t's storage, offset and strides, so it holds for every layout a class may hand
    out (slices, transposes, views into a larger slab, NumPy's arrays); t.view(torch.uint8)
    refuses all but a contiguous last dimension. Reading only: it bypasses t's own checks.
    """
    size = t.element_size()
    view = torch.empty(0, dtype=torch.uint8, device=t.device)
    strides = tuple(stride * size for stride in t.stride()) + (1,)
    return view.set_(t.untyped_storage(), t.storage_offset() * size, (*t.shape, size), strides)


def raw(t):
    """The bytes of a tensor of any dtype and layout, as a host uint8 array (one row per element)."""
    if t.numel() == 0:  # nothing to read, whatever its strides (NumPy gives empty arrays zero strides)
        return torch.zeros((*t.shape, t.element_size()), dtype=torch.uint8).numpy()
    return byte_view(t).contiguous().cpu().numpy().copy()


def fill_bytes(t, seed):
    """Overwrite every byte of `t` in place with a pattern that depends on `seed`; t's layout is any.

    The pattern repeats every 251 bytes, so a buffer of millions of bytes costs one tiled copy.
    It is written element-wise, by t.copy_, so t's own checks (an inference tensor) still apply.
    """
    if t.numel() == 0:
        return
    count = t.numel() * t.element_size()
    period = ((torch.arange(251) * 7 + seed * 31 + 1) % 251 + 1).to(torch.uint8)
    if t.dtype == torch.bool:
        period = period % 2  # any other byte is not a valid bool
    pattern = period.repeat(count // 251 + 1)[:count]
    t.copy_(pattern.view(t.dtype).reshape(t.shape).to(t.device))


def sync():
    """Non-blocking copies have landed only once the stream is synchronized."""
''' + devices.per_device(lambda d: d.sync)

CONSTRUCT = "Buffer(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)"
