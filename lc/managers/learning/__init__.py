"""What incremental and lifelong learning share at the edge: triggers, samples, the job loop.

A learning job cycles Train -> Eval -> Deploy -> Train. The GM creates the stage's pod only
once an LC reports the stage `Ready` with the `input` the pod needs (upstream-gm.md
section 3.4), and that decision is made here, on the node that holds the job's Dataset:
that LC counts the samples, splits the new ones into train and eval sets by
`spec.dataset.trainProb`, evaluates the train trigger on them, writes the sample files
under the job's `outputDir` and reports `{"phase", "status", "input", "output": null}`
(upstream-lc.md sections 4.5-4.7). The deploy decision is made on the eval node when the
job names one (`sedna.io/Eval`, as upstream's GM sends Deploy/Waiting there), else on the
Dataset's node too, so exactly one LC decides each stage.

Where this departs from upstream, on purpose (upstream-lc.md section 5):
- a stage is decided once per Waiting condition (its position, stage and time form the
  cycle's token) and the token is committed with the report in one transaction, so a
  report is sent exactly once per cycle, across restarts, and a stale view of the stage
  never starts a second round (B-25, B-26);
- rounds, the sample offset and the pending samples are job state in the store and survive
  a restart (B-20); a job recreated under the same name (new uid) starts afresh;
- a missing trained model, bad eval metrics or a failed copy is reported as the stage
  `Failed` (the GM restarts the cycle) instead of a crash, a `null` report or a silent
  "Completed" (B-3, B-4, B-16, B-30);
- triggers: a metric index out of range, negative or malformed, or a metric that is not a
  number (a list named without an index, B-22) makes the condition false, never a crash
  (B-7); an unknown operator or a bad timer is an error logged once, and the trigger
  never fires; `checkPeriodSeconds` sets how often the trigger is evaluated (B-24); the
  timer compares clock times, not strings;
- eval samples are the new eval samples of the last five rounds, each once (B-23); txt and
  csv datasets work for both kinds, the format case-insensitively (B-27); copies truncate
  (B-6);
- files go through lc/files.py: the index is read and models are copied only if they are
  regular files within the LC's caps (a FIFO, a device or an oversized file is an error the
  stage reports or the job logs), in chunks on daemon threads, so a deleted job or a
  stopping LC ends a read or copy after one chunk; a stored job ticks only once the GM has
  confirmed it still exists (lc/managers/base.py `Confirmations`).
- Datasets, outputDirs and Models on S3 (`s3://`): read, written and copied with the
  credentials the GM sends with the objects (lc/managers/learning/storage.py); a missing
  credential is an error the job logs once, never a crash.

The modules, each one idea, in the order they may import each other:
- `triggers`: the trigger language (conditions, timers, the deploy trigger's stats); pure;
- `spec`: fields of a job object (spec paths, annotations, outputDir, trainProb); pure;
- `stages`: the job's stage read from its conditions, the models earlier stages reported,
  and the stage reports the LC makes;
- `models`: models in upstream's shape, matching one, copying a model file;
- `storage`: where a job's files go, host paths or s3 objects, and model copies between them;
- `state`: what a job remembers between ticks and across restarts;
- `samples`: reading a Dataset's samples, splitting the new ones, writing sample files;
- `kind`: one tick's view and the hooks a learning kind plugs in (IL, LL);
- `loop`: one job's periodic tick, deciding each stage once;
- `manager`: the jobs of one kind on this node and their tasks.
"""
