"""The emulator: template.yaml's resources on moto, its ASL and handlers run as they are.

engine (the stack's lifecycle and clients), provisioning (its resources created),
executions (started, waited for), ingress (EventBridge rules and Pipes emulated),
template (the template read as CloudFormation would), iam and limits (AWS's permissions and quotas),
lambdas and jsonata_node (the functions in-process, JSONata under node), patches
(every change made to moto: hooks, fidelity, speedups), samples (ingress emulation:
the event shapes SAM users have), inventory (S3 Inventory reports), server and
forwarding (`onceflow up` and the commands sent to it), target (the stack as the
operations see it), errors (what a command reports).

Importing this package imports nothing: moto loads with the engine, not before.
"""
