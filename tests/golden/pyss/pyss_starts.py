"""Prints "job_id start" for every job of an SWF trace as pyss schedules it (Python 2.7).

pyss is the Tsafrir/Feitelson group's scheduling simulator (github.com/dinesh121991/pyss holds a
copy); this driver is ours and is not part of gangwatch: it made kth_sp2_10000_starts.txt.gz.

    PYENV_VERSION=2.7.18 python2 -O pyss_starts.py TRACE.swf.gz 10000 100 easy > easy.txt
    (PYSS = the pyss checkout's src/ folder, default /tmp/pyss/src)

Records with no run time or no processors are left out, as gangwatch's replay skips them (pyss
would run them as 1-second jobs); pyss takes everything else with its own rules.
"""
import sys, gzip
import os
sys.path.insert(0, os.environ.get('PYSS', '/tmp/pyss/src'))
from base.workload_parser import parse_lines
from base.prototype import _job_input_to_job
from schedulers.simulator import Simulator
from schedulers.fcfs_scheduler import FcfsScheduler
from schedulers.easy_scheduler import EasyBackfillScheduler
from schedulers.conservative_scheduler import ConservativeScheduler
path, limit, procs, pol = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
opener = gzip.open if path.endswith('.gz') else open
lines = []
n = 0
for line in opener(path):
    if line.startswith(';') or not line.strip():
        continue
    n += 1
    if limit and n > limit:
        break
    x = line.split()
    if int(x[3]) <= 0 or int(x[4]) <= 0:
        continue  # gangwatch's replay skips these; pyss would run them as 1-second jobs
    lines.append(line)
jobs = [_job_input_to_job(j, procs) for j in parse_lines(lines)]
sched = {'fcfs': FcfsScheduler, 'easy': EasyBackfillScheduler, 'conservative': ConservativeScheduler}[pol](procs)
sim = Simulator(jobs, procs, sched)
sim.run()
out = sys.stdout
for j in jobs:
    out.write('%d %d\n' % (j.id, j.start_to_run_at_time))
