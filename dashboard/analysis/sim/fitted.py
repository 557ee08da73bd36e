"""The default workload model's figures, fitted to the Microsoft ITP 2021 GPU trace.

Source: microsoft/elasticflow-traces @ 277ed24d `data/raw-traces.tar.gz` (MIT licence; 69,351
first-party deep-learning training jobs from 10 ITP clusters, 2021-03-04 to 2021-05-03; the copy
used is ../shared/traces/microsoft-itp-2021-raw-traces.tar.gz). Fitted offline by
`python -m dashboard.analysis.sim.fit <that file>` (see fit.py for the method); only these figures
are kept in the project, not the trace.
"""

# Share of jobs by GPU count (ITP has only these sizes).
SIZE_SHARE = {1: 0.83174, 2: 0.02138, 4: 0.03419, 8: 0.10107, 16: 0.00549, 32: 0.00510, 64: 0.00102}

# Run time per size class: log-normal (mu, sigma) of ln(seconds), durations clipped below at 60 s.
DURATION_LOGNORMAL = {
    1: (8.919, 1.088),    # 57,682 jobs; median 2.1 h
    2: (8.284, 1.151),    # 1,483 jobs
    4: (9.275, 1.618),    # 2,371 jobs
    8: (9.8, 1.526),      # 7,009 jobs; median 5.0 h
    16: (9.701, 1.978),   # 381 jobs
    32: (10.381, 1.803),  # 354 jobs; median 9.0 h
    64: (9.988, 1.726),   # 71 jobs
}

# Arrivals: this share of inter-arrival gaps is zero (jobs submitted together); the others,
# divided by their cluster's mean positive gap, are log-normal (mu, sigma).
BATCH_SHARE = 0.1333
GAP_LOGNORMAL = (-2.812, 2.421)

# Mean GPU-seconds per job over the whole trace (after the 60 s clip): sets the arrival rate for a
# target load, since ITP does not say how large its clusters were.
MEAN_GPU_SECONDS_PER_JOB = 84754.2
