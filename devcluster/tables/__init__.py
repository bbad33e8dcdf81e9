"""`kubectl get` Tables: the printers of the built-in kinds, custom resources' printer columns,
and the Table they make (`render.py`).

Pure; above `storage` (events.k8s.io Events print through their core view) and
`strategy`, below the HTTP layer.
"""
