"""Who may do what: ServiceAccount tokens and their review, RBAC authorization and the default
policy, the access reviews, and the admission steps every write goes through.

Above `storage` (the token authority reads and writes through the store), below the HTTP
layer and the controllers that call it.
"""
