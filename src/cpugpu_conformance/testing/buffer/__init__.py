"""The buffer contract, one module per area (as pandas' tests/extension/base/): construction,
mutability, numpy_view, copies, device_promises, side_effects, independence, engine_scale,
stateful; ``contract`` joins them into ``BufferContractTests``. The areas use shared/; nothing
here imports the verdict or the engine room."""
