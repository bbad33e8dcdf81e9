"""One module per reconciled kind: its declaration, its pure `build` and its pure `status`.

`DECLARATIONS` is the list the GM runs (gm/app.py builds one generic controller per entry,
gm/controllers/reconciler.py). A kind module imports from gm/controllers (declare,
conditions) and gm/workers (the child builders), never from another kind module; what
two kinds share lives in a module of its own here (`jobs`, `multiedge`).
"""
