"""The LC's durable state in SQLite: resources from the GM, the outbox, job state, workers.

Why SQLite and how it is used:
- Resources the GM sent are kept so a restarted LC resumes its dataset monitors and job
  routing before (or without) reaching the GM.
- The outbox holds every report meant for the GM under a monotonic sequence number
  (AUTOINCREMENT, so a number is never reused after acked rows are deleted); the link
  sends `pending(...)` and deletes with `ack(...)` once the GM applied them. A row of a
  latest-wins kind carries its fold key (lc/fold.py): the ack of the newest row of a key
  also deletes the older rows of that key, which the link did not send (they changed
  nothing the newest one does not overwrite), in the same transaction.
- journal_mode=WAL with synchronous=FULL by default: a worker is answered 200 only after
  its report is committed and on disk, so it survives power loss, not just a process crash
  (NORMAL in WAL mode may lose the last commits on power failure). Edge nodes lose power.
  Group commit (lc/groupcommit.py) shares one fsync among all reports that arrive
  together, and the fsync runs on a thread of its own: the connection commits without
  waiting for the disk and the write-ahead log is fsynced once for every batch committed
  meanwhile, before any of them is answered (or sent to the GM). LC_DB_SYNCHRONOUS=NORMAL
  trades the guarantee for latency.
- The outbox is bounded in bytes (`StoreBounds.outbox_bytes`): its rows are accepted
  reports that must not be lost, so a worker report that would take it over the cap is
  refused (the API answers 503) and nothing old is dropped for it, except reports that a
  newer row of their fold key supersedes (`covered`, kept by a trigger): they count as
  free room, and are deleted once the outbox is over its cap. So a steady stream of
  latest-wins reports of one object never fills it, while below the cap they stay for the
  link to fold and settle with the covering ack as before. Reports that waited for their
  job (at most the unknown owners' cap) and the LC's own small reports are never refused.
- A report the GM can never apply (refused with a reason, or one that cannot be sent) is
  moved from the outbox to `lc_deadletters` with the reason, in one transaction, so it
  neither blocks the reports behind it nor disappears without a trace. Its body is cut to
  `StoreBounds.dead_letter_body` bytes (a marker keeps the start and the length), and the
  table keeps the newest rows within a count and a byte cap.
- Worker records (GET /sedna/workers) are keyed by namespace/name; they go with their
  job (`forget_workers`) and expire after the worker TTL. A record whose owner this node
  does not hold (no such job here, or no job kind matched yet) expires sooner and counts
  against its own byte cap: any client on the network can send reports for owners that do
  not exist. Both caps drop the oldest records first, never one written by the same
  group commit (each was answered 200); the TTLs and caps are applied once per group
  commit, after all its reports, so until the next one a table may hold one batch's
  records over its cap.
- Every byte cap is enforced from `lc_usage` (records and bytes per table or class of
  records), which triggers keep in step with every insert, update and delete in the same
  transaction, and which is recounted at every open; so a cap costs one lookup per write
  (per group commit for the worker records), not a scan. Each trigger statement finds its
  lc_usage row by key alone: an OR in its WHERE made SQLite build a temporary table for
  every row written. Listings are read a page at a time (`worker_page`, `dead_letter_page`) with
  each item's JSON bounded, never a whole table.
- Every SQLite call runs on one dedicated thread with its own connection, never on the
  event loop. Tables are prefixed `lc_` so the file can coexist with the `resources`
  table an upstream LC may have left at the same default path.

The modules, each one idea:
- `schema`: the tables, their triggers and invariants, opening a file and migrating it;
- `bounds`: the TTLs and byte caps (`StoreBounds`), the `lc_usage` lookup they are enforced
  from, and listing pages bounded in bytes;
- `codec`: stored values as JSON text, and that text cut to a bound;
- `outbox`, `workers`, `deadletters`: each table's rows and its work on the DB thread;
- `facade`: `Store`, the async API, run on the DB thread and committed in groups.
"""
