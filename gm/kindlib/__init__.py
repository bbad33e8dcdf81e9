"""What several kinds share, so that no kind module imports another.

conditions (the condition and counting rules of every kind's status), waiting (what a job's
workers are stuck on). Pure; a module here imports gm.reconcile.declaration, gm.workers and
gm.edge.reports, never gm.kinds.
"""
