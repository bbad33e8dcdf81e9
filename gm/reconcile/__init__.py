"""The engine: one generic level-triggered controller and the declaration it runs.

declaration (what a kind declares), reconciler (the controller that runs a declaration),
runner (workers over a work queue, typed outcomes), planning (the pure child diff), executor
(the writes: plans, status, problems), problems (what stops a reconcile, as a condition),
context and credentials (handles and cache lookups), caches (what the informers keep).
It imports gm.kube, gm.workers (the owned-child labels, the service-account guard), gm.config
and gm.reports (what an edge report changes); never a kind module.
"""
