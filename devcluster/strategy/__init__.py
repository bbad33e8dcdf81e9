"""What the API server does to an object of each kind on a write: defaulting, create-time status,
validation, the rules of updates and deletes, CRDs and their custom resources.

Pure functions over plain dicts, keyed by (group, resource); `dispatch.py` assembles the
tables the store consults. May import `machinery` only.
"""
