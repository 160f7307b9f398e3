"""tests/tb_events.py — reads the TensorBoard event file gpt_train wrote with the
tensorboard package's own reader (tensorboard 2.17.1 from .venv: its TFRecord reader checks
both masked CRC32Cs of every record) and compares it with the run's --log-jsonl.

    .venv/bin/python tests/tb_events.py TBDIR LOG.jsonl
    .venv/bin/python tests/tb_events.py --killed TBDIR


Prints `ok - ...` / `not ok - ...` lines (one per check); exit status 0 iff all are ok.
Checks:
  - the file holds one event file, its first event says file_version brain.Event:2;
  - every scalar in the file is a value of the JSONL log at the same step (Megatron's tag
    names; "TAG vs samples" at the iteration's consumed samples), and every JSONL value that
    has a tag is in the file: equal within float32 rounding (the event stores a float);
  - the file cut in the middle of a record, at several places, reads back every record before
    the cut and nothing else; a flipped bit makes the reader stop before that record.
The JSONL must come from a run with --log-interval 1 and --tensorboard-log-interval 1 (then
the interval's mean loss is the iteration's loss that TensorBoard gets).
--killed: the file of a run killed with SIGKILL while it wrote; the reader reads every whole
record in it (and nothing of a cut one at its end), at least one scalar, steps in order.
"""
import glob
import json
import math
import os
import sys
import tempfile

from tensorboard.backend.event_processing import event_file_loader

results = []


def report(ok, name, detail=""):
    results.append(ok)
    print("%s - tensorboard: %s%s" % ("ok" if ok else "not ok", name,
                                      "" if ok or not detail else " (%s)" % detail))


def events(path):
    """(tag, step, value) of every scalar, and the number of events, as the reader sees them."""
    out, n = [], 0
    for ev in event_file_loader.LegacyEventFileLoader(path).Load():
        n += 1
        if ev.HasField("summary"):
            for v in ev.summary.value:
                out.append((v.tag, ev.step, v.simple_value))
    return out, n


def expected(jsonl):
    """{(tag, step): value} that the JSONL log says TensorBoard must hold."""
    rows = [json.loads(line) for line in open(jsonl)]
    samples = {r["iteration"]: r["consumed_samples"] for r in rows if "consumed_samples" in r}
    want = {}

    def pair(tag, it, v):
        want[(tag, it)] = v
        want[(tag + " vs samples", samples[it])] = v

    nan = float("nan")
    for r in rows:
        it = r["iteration"]
        if "valid_lm_loss" in r:
            loss = r["valid_lm_loss"]
            pair("lm loss validation", it, nan if loss is None else loss)
            pair("lm loss validation ppl", it, nan if loss is None else math.exp(min(20, loss)))
            continue
        if "lm_loss" not in r:
            continue
        g = lambda k: nan if r[k] is None else r[k]
        pair("learning-rate", it, g("lr"))
        pair("batch-size", it, g("global_batch_size"))
        pair("lm loss", it, g("lm_loss"))
        pair("loss-scale", it, g("loss_scale"))
        pair("grad-norm", it, g("grad_norm"))
        if "num_zeros" in r:
            pair("num-zeros", it, g("num_zeros"))
        if "params_norm" in r:
            pair("params-norm", it, g("params_norm"))
        if "world_size" in r:
            pair("world-size", it, g("world_size"))
        for key in ("mem_reserved_bytes", "mem_allocated_bytes", "mem_max_allocated_bytes",
                    "mem_allocated_count"):
            if key in r:
                want[(key.replace("_", "-"), it)] = g(key)
        want[("iteration-time", it)] = g("elapsed_ms") / 1000
        want[("throughput", it)] = g("tflops_per_gpu")
        for name, (lo, hi) in r.get("timers_ms", {}).items():
            want[(name + "-time", it)] = hi
    return want


def same(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= 1e-6 * abs(b) + 1e-30


def record_ends(data):
    """The end offset of every whole TFRecord in data (the framing: length, CRC, data, CRC)."""
    ends, pos = [], 0
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos:pos + 8], "little")
        if pos + 12 + length + 4 > len(data):
            break
        pos += 12 + length + 4
        ends.append(pos)
    return ends


def killed(tbdir):
    files = glob.glob(os.path.join(tbdir, "events.out.tfevents.*"))
    report(len(files) == 1, "one event file in %s" % tbdir, "found %d" % len(files))
    if len(files) != 1:
        return 1
    data = open(files[0], "rb").read()
    ends = record_ends(data)
    got, n = events(files[0])
    steps = [s for t, s, _ in got if t == "lm loss"]
    report(n == len(ends) and len(got) > 0 and steps == sorted(steps),
           "a run killed while writing left a readable file: %d bytes, %d whole records, the "
           "reader returns %d events (%d scalars, lm loss up to iteration %s)" %
           (len(data), len(ends), n, len(got), steps[-1] if steps else "-"))
    return 0 if all(results) else 1


def main():
    if sys.argv[1] == "--killed":
        return killed(sys.argv[2])
    tbdir, jsonl = sys.argv[1], sys.argv[2]
    files = glob.glob(os.path.join(tbdir, "events.out.tfevents.*"))
    report(len(files) == 1, "one event file in %s" % tbdir, "found %d" % len(files))
    if len(files) != 1:
        return 1
    path = files[0]
    first = next(iter(event_file_loader.LegacyEventFileLoader(path).Load()), None)
    report(first is not None and first.file_version == "brain.Event:2",
           "the first event says file_version brain.Event:2")
    got, n_events = events(path)
    want = expected(jsonl)
    seen = {}
    for tag, step, v in got:
        seen[(tag, step)] = v
    extra = [k for k in seen if k not in want]
    missing = [k for k in want if k not in seen]
    differ = [(k, seen[k], want[k]) for k in seen if k in want and not same(seen[k], want[k])]
    tags = sorted({t for t, _ in seen})
    report(not extra and len(seen) == len(got),
           "every one of the %d scalars (%d tags) is a value of the JSONL log, once" %
           (len(got), len(tags)), "not in the log: %s" % extra[:5])
    report(not missing, "every value of the JSONL log that has a tag is in the file",
           "missing: %s" % missing[:5])
    report(not differ, "every scalar equals the JSONL value (float32 rounding)",
           "differ: %s" % differ[:5])
    print("# tags: " + ", ".join(tags))

    # a run killed while writing: the file cut inside a record reads up to that record
    data = open(path, "rb").read()
    ends = record_ends(data)
    report(ends and ends[-1] == len(data) and len(ends) == n_events,
           "the file is %d whole TFRecords, one per event" % len(ends))
    with tempfile.TemporaryDirectory() as tmp:
        cut_ok, cuts = True, []
        for k in (1, len(ends) // 2, len(ends) - 1):
            cut = ends[k - 1] + (ends[k] - ends[k - 1]) // 2     # mid-record k (0-based)
            p = os.path.join(tmp, "events.out.tfevents.cut%d" % k)
            open(p, "wb").write(data[:cut])
            part, n = events(p)
            cuts.append("%d bytes: %d events" % (cut, n))
            if n != k or part != got[:len(part)]:
                cut_ok = False
        report(cut_ok, "cut mid-record, the file reads every record before the cut (%s)" %
               "; ".join(cuts))
        k = len(ends) // 2                 # a flipped bit in record k's data: its CRC fails
        bad = bytearray(data)
        bad[ends[k - 1] + 14] ^= 0x10
        p = os.path.join(tmp, "events.out.tfevents.bad")
        open(p, "wb").write(bytes(bad))
        _, n = events(p)
        report(n == k, "a flipped bit in record %d stops the reader there (its CRC32C)" % k,
               "read %d events" % n)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
