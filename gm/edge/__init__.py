"""The GM's side of the edge: everything between an LC's websocket and a CR's status.

hub (sessions), auth (node identity), objects (what each node is sent), reports (report
parsing and what becomes of a report), order (status never moves backwards), status (report
dispatch by kind). Pure modules here (reports, order) import no server code.
"""
