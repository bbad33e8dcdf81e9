"""The HTTP face of the API server: the aiohttp application and routing (`app.py`), HTTP
conventions, discovery and OpenAPI, request bodies in JSON, YAML and protobuf (with the
field table of the built-in types), field validation, fault injection.

The top of the API stack: it may import `machinery`, `strategy`, `storage`, `auth` and
`tables`; nothing below imports it.
"""
