"""Source snippets shared by the tests; each is executed by the suite and pasted into reproducers."""

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
    """Overwrite every byte of `t` in place with a pattern that depends on `seed`."""
    view = t.view(torch.uint8)
    pattern = (torch.arange(view.numel(), dtype=torch.int64) * 7 + seed * 31 + 1) % 251 + 1
    if t.dtype == torch.bool:
        pattern = pattern % 2  # any other byte is not a valid bool
    view.copy_(pattern.to(torch.uint8).reshape(view.shape).to(view.device))


def sync():
    """Non-blocking copies have landed only once the stream is synchronized."""
    if device == "cuda":
        torch.cuda.synchronize()
'''

CONSTRUCT = "Buffer(*size, dtype=dtype, device=device, pin_memory=pin_memory, with_numpy=with_numpy)"
