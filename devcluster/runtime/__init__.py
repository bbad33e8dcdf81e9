"""The process runtime: a pod's containers run as local processes (`process.py`), given what a
kubelet gives a pod (`projection.py`: volumes, the service-account mount, in-cluster env,
path rewrites; `podshim/` carries the rewrites into Python processes).

The kubelet's back end: it may import `machinery`, the controllers' pure pod helpers and
the supervisor; the controllers do not import it (the cluster hands it to the kubelet).
"""
