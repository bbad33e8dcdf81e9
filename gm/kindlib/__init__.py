"""What several kinds share, so that no kind module imports another. Pure.

conditions (the condition and counting rules of every kind's status), waiting (what a job's
workers are stuck on), jobs (the Job semantics of ReidJob and VideoAnalyticsJob), learning
(the stage machine of IncrementalLearningJob and LifelongLearningJob) and learningpods (the
pods they share), multiedge (the multi-edge rules of ObjectSearch and ObjectTracking).
A module here imports gm.reconcile.declaration, gm.workers, gm.kube.resources and
gm.reports and gm.edge.order, never gm.kinds.
"""
