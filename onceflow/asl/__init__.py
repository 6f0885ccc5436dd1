"""The state machine definitions' own tooling: their graphs and the diagrams of docs/design.md
(diagram), the deployed JSON generated from commented YAML (asl_source) and the batch
mode's definition from the processor's own source (batch_definition), and the worst-case duration
of an EXPRESS execution (worstcase).

Reads files only: it runs nothing, and imports nothing of onceflow but the project.
"""
