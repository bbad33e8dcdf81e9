"""The API's vocabulary, shared by every other part of the dev cluster: errors, object metadata,
the resource type, name and label syntax, field-error helpers, selectors, quantities.

Pure, and the bottom layer: nothing here imports from the rest of `devcluster`.
"""
