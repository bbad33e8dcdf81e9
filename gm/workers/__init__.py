"""The building blocks of worker objects, shared by every kind's builders. Pure (no I/O).

template (the user's PodTemplateSpec rendered with env and knobs, the ServiceAccount guard),
storage (URLs -> mounts and the storage-initializer), inputs (Models, Datasets, Secrets a CR
names), owned (the child objects the GM owns: Pod, Deployment, Service, HPA, stamped with
owner reference, labels and spec hash), deployspec (an inline Deployment spec), gojson
(values as upstream's Go code writes them), specerrors (why a CR's workers cannot be built).
The builders themselves live with their kinds (gm/kinds/, gm/kindlib/). Imports only
gm.config, gm.errors and shared.
"""
