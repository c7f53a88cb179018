"""The verdict: everything that turns test evidence into a result file (recording, judge,
state_judge, manifest, keys, plan, stash, exit_status, environment, last_lines, reports,
start). It reads the evidence the tests leave and imports no area of the contract: the plugin
hands it the areas it needs (buffer.contract.AREAS)."""
