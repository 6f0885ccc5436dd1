"""onceflow's benchmark: `onceflow bench` in a clone of the repository (docs/benchmarks.md).

It lives outside the installed package (the wheel ships `onceflow` only), so the command
line and the local engine never import it: `run` measures and renders, `pricing` holds
the dated AWS prices and the cost model, `measure_speedups` times the engine's speed-ups.
"""
