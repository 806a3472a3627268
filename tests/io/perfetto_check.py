# Opens a tower --trace file in Perfetto's trace processor and prints, as JSON, the number of
# slices on each thread's lane: {"lanes": {"tower 0 (cpu:0)": 123, ...}}. Exits 3 when the trace
# processor's program cannot be had (the Python package downloads it on first use).
import json
import sys

from perfetto.trace_processor import TraceProcessor

try:
    tp = TraceProcessor(trace=sys.argv[1])
except Exception as e:  # no network: the trace processor's binary cannot be downloaded
    print("cannot start Perfetto's trace processor: %s" % str(e).splitlines()[-1], file=sys.stderr)
    sys.exit(3)
lanes = {}
for row in tp.query(
    "select thread.name as name, count(*) as n from slice "
    "join thread_track on slice.track_id = thread_track.id using (utid) group by thread.name"
):
    lanes[row.name] = row.n
print(json.dumps({"lanes": lanes}))
