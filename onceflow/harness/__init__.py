"""The harnesses: the demo, the chaos run and the benchmarks, each on a local engine,
over one shared module (common).

They drive the emulator (onceflow.local), judge by the operations (onceflow.ops)
and record for the viewer (onceflow.view); nothing below them imports them.
"""
