"""The engine-object checks: ``MutableStateTests`` and ``assert_mutable_state`` (mutable_state),
the walk that finds an object's tensors (walk), the checks over them (checks), the report a
person reads (report) and the reproducer it prints (reproducer). Uses shared/ only."""
