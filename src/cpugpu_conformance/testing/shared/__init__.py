"""What both kinds of test share: scenarios and their reproducers, strategies, contexts, dtypes,
checks, helpers, threads, budget, stamps, marks, the caller's device state. Imports no other
room of testing/."""
