"""The API's state: the registry of served resources, the in-memory store and its verbs, watches
and their history, pagination, patches, server-side apply and field ownership, views of one
storage under another version, Service address allocation.

Below the HTTP layer and the controllers, above `machinery` and `strategy` (the only parts
of the dev cluster it imports).
"""
