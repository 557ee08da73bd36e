"""Every threshold the diagnosis uses, in one place, each with where its value comes from.

Values are plain module constants so tests and sites can read them; `Thresholds` bundles them so a
caller can override some (`dataclasses.replace(DEFAULT, stall_min_seconds=120)`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    # ---- time
    # Slurm prolog, container start and the data loader's first shards take a few minutes on real
    # clusters (jobstats ignores a job's first minutes too); a job younger than this is not judged.
    job_grace_seconds: float = 300.0
    # Recent stretch a verdict is about: long enough to hold 8 samples at 15 s (enough for a median
    # that one outlier cannot move), short enough to detect a stall within the 2-minute goal.
    recent_seconds: float = 120.0
    # A stall must last this long before it is reported; checkpoints that write are excluded by
    # their write traffic, evaluation phases by their normal SM/utilisation ratio, so 60 s (four
    # 15 s samples) suffices and keeps detection under 2 minutes (issue 6's goal).
    stall_min_seconds: float = 60.0
    # Without filesystem signals a checkpoint (GPUs idle, nothing on the wire) cannot be told from
    # an idle job; checkpoints of 1-120 s are usual (the simulator draws 30-120 s; Megatron/DeepSpeed
    # checkpoints of multi-GB shards to Lustre take a minute or two), so wait longer before judging.
    stall_min_seconds_blind: float = 300.0
    # A sample older than this at the end of the window is stale (3 missed 15 s scrapes; Prometheus
    # itself marks a series stale after 5 minutes, too slow for diagnosis).
    stale_seconds: float = 45.0

    # ---- activity (the job's own baseline)
    # Baseline = this quantile of the job's own activity (and traffic) over the window: its normal
    # training level. A high quantile keeps the baseline at the healthy level while a stall fills
    # most of the window (it needs only 1 - q of the job's samples healthy: 3 % = 2 minutes of an
    # hour), and one noisy sample cannot set it alone at 240 samples.
    baseline_quantile: float = 0.97
    # A step is degraded when activity falls below this fraction of the baseline. Evaluation phases
    # run at about 0.6 of training utilisation (simulator; forward-only passes on real models run
    # at 50-70 %), so the cut sits below them.
    degraded_fraction: float = 0.45
    # Absolute utilisation below which a GPU counts as idle: NVML reports 0 % for a GPU with no
    # kernel in the sample period; 2 % tolerates monitoring kernels (DCGM profiling itself).
    idle_util: float = 0.02
    # Kernels resident (utilisation high) but SMs doing nothing: NCCL spins in a collective this
    # way (a hang or a network wait). NVML utilisation counts any resident kernel as busy.
    busy_util: float = 0.80
    hang_sm: float = 0.05  # SM activity of a GPU spinning in a hung collective (DCGM PROF_SM_ACTIVE ~ 0.01)
    # SM activity below this fraction of the job's baseline while utilisation stays busy means the
    # kernels wait (network); evaluation keeps the training ratio, so it is not caught.
    waiting_sm_fraction: float = 0.40
    # ... or SM activity below this share of utilisation whatever the baseline (healthy training
    # keeps SM active at 40-90 % of utilisation; NCCL spinning on the network at ~15 %).
    waiting_sm_ratio: float = 0.25
    # Without SM activity (no DCGM profiling), board power separates work from spinning: power
    # tracks SM activity, a GPU spinning in a collective draws little above idle (H100: ~100-200 W
    # of 700 W) while training draws 60-100 % of TDP. Fractions of the job's own baseline power:
    hang_power_fraction: float = 0.45
    waiting_power_fraction: float = 0.60

    # Activity (SM active, else utilisation) below which GPUs do no useful training work whatever
    # the job's own baseline; used with I/O pressure for jobs stalled since before the window
    # (healthy training keeps SMs 40-90 % active: DCGM profiling guides, MLPerf traces).
    low_activity: float = 0.15

    # GPU memory (framebuffer used) at or above this means the job's processes hold the GPU: the
    # driver's own reservation and a bare CUDA context take a few hundred MiB (NVML/DCGM FB_USED on
    # an idle GPU), a training or inference process holds GBs (weights, optimizer state, caches).
    held_mem_bytes: float = 1.5 * 2**30

    # ---- I/O
    # PSI io "some" above this fraction of wall time: tasks are waiting on I/O most of the time.
    # Healthy training nodes sit at 0-5 % (kernel docs: PSI; simulator 0.3 %; measured on our hosts).
    psi_io_stalled: float = 0.30
    iowait_stalled: float = 0.25  # CPU iowait share that marks an I/O-bound node (same reasoning, coarser)
    # Readers waiting a smaller share of the time mark an input stall too when the job's reads
    # also fell below `read_fell_fraction` of its own baseline while the GPUs it holds starve
    # (activity below `degraded_fraction` of baseline): pressure at half the stall cut is still 3x the healthy
    # ceiling, and the loaders read less because they wait (PSI docs: "some" = at least one task
    # stalled). Network stalls and hangs read less as well, but with no one waiting on storage.
    psi_io_elevated: float = 0.15
    # With readers waiting most of the time (the full stall cuts above, not while writing a
    # checkpoint), a smaller slowdown is already the storage's doing: loader-bound jobs run at
    # 10-50 % of their pace, and evaluation, the healthy dip this cut must stay below, reads
    # little and keeps 50-70 % with no one waiting (as link_degraded_fraction for a link event).
    io_degraded_fraction: float = 0.55
    iowait_elevated: float = 0.12
    read_fell_fraction: float = 0.5
    # Where PSI is not exported (kernels that leave it off by default: RHEL 8 and 9 need psi=1;
    # node_exporter without its pressure collector), readers wait when the node's tasks in I/O wait
    # (/proc/stat procs_blocked: nr_iowait(), the same in-iowait tasks PSI's io line samples) are at
    # least `blocked_waiting` per node and `blocked_ratio` times their reference: the job's own
    # typical count, or the cluster's typical node where that is lower (a job stalled since before
    # the window has its stall as its own past). Loaders that keep up wait for I/O now and then
    # (0-1 task at a scrape); loaders that starve the GPUs all wait at once (one per worker).
    blocked_waiting: float = 2.0
    blocked_ratio: float = 3.0
    # A checkpoint writes at least this many bytes/s per node (multi-GB shards in 30-120 s).
    checkpoint_write_bytes: float = 50e6
    # A pause that writes at checkpoint speed is a checkpoint for this long; past it, a stall
    # (checkpoints of 30-120 s are usual, see stall_min_seconds_blind; 5 min is generous).
    checkpoint_max_seconds: float = 300.0
    # A target's read latency this many times its peers' median is a slow target (Lustre OST
    # latency is a few ms healthy; a degraded OST shows 10-100x: LU-tickets, simulator 20x). The
    # Storage page marks a target slow at the same multiple of the median target.
    latency_ratio: float = 5.0
    # A stall's culprit target is tested over its last this many seconds, as its cause is (see
    # stall_min_seconds): over a long stall other targets may have been slow for a while, and
    # averaging them in would hide the one slow now among several slowed ones.
    culprit_recent_seconds: float = 120.0

    # ---- network
    # port_xmit_wait ticks/s above this multiple of the job's own baseline (or of the cluster's
    # median node) marks congestion; healthy all-reduce shows a few 1e5 ticks/s (simulator) and
    # congested ports orders of magnitude more (Mellanox: xmit_wait grows with credit starvation).
    # The Network page marks a leaf switch congested at the same multiple of the median leaf.
    wait_ratio: float = 10.0
    # A node that carries at least this much InfiniBand traffic (bytes/s, median over the window)
    # is a busy node, the reference for "typical" transmit wait; management traffic (subnet manager
    # sweeps, IPoIB ARP) stays in the kB/s.
    busy_link_bytes: float = 1e6
    # A node's own past wait, where it is the reference (a congested leaf by history), is that of
    # the past steps it carried at least this share of its traffic now: a node that only began to
    # send (a job started on it) waits "10x" its idle self, and background traffic (storage over
    # IPoIB, which node_exporter counts with the rest) at a thousandth of a job's keeps it "busy".
    past_traffic_share: float = 0.1
    # Congestion also needs the wait at least this share of the job's own median: a job whose
    # traffic always waits (MoE all-to-all on a busy fabric) is not congested while it waits less.
    own_wait_fraction: float = 0.8
    # A port whose transmit wait is this many times the median of the job's other ports is where
    # the collective backs up (the others wait for it; healthy rails of one job are within tens of
    # percent of each other, as NCCL spreads traffic evenly over them).
    port_wait_ratio: float = 2.0
    # InfiniBand traffic of a gang below this fraction of its baseline is a collapse.
    ib_collapse_fraction: float = 0.30
    # A hung gang moves (almost) nothing: below this fraction of its baseline traffic.
    ib_flat_fraction: float = 0.05

    # RoCE (no port_xmit_wait): the congestion signal is ECN-marked packets plus CNPs acted on plus
    # PFC pause frames received, per second, judged with wait_ratio against the cluster's typical
    # busy node and the job's own, as xmit_wait is: DCQCN marks a trickle on a healthy loaded link
    # and orders of magnitude more when a switch queue passes its ECN threshold (NVIDIA's RoCE
    # congestion control notes; simulator 100x). Sequence errors, NAKs, ACK timeouts and adaptive
    # retransmissions of one port count as a link event from this many per step: a healthy lossless
    # fabric counts a handful per day (procfs' production mlx5 capture: 2 sequence errors, 131 ACK
    # timeouts and 99 adaptive retransmissions since boot), a
    # link that drops takes every in-flight QP into retransmission at once (hundreds).
    roce_error_events: float = 10.0
    # A RoCE port's own port_xmit_wait, where its firmware counts it, counts only the ticks PFC held
    # the port: the node received pause frames at every step it waited (both read in one scrape).
    # An InfiniBand port waits for credits, with no pause frame behind it; its nodes' NICs are the
    # management network, paused now and then (a fifth of the nodes for minutes in the catalogue).
    # So a wait is PFC's where this share of the node-steps it moved at had pause frames, over at
    # least pfc_wait_min_steps of them (two minutes of one node at 15 s: not one blip).
    pfc_wait_share: float = 0.9
    pfc_wait_min_steps: int = 8

    # A link that went down keeps the gang suspect this long: a failing cable or transceiver flaps
    # again within minutes (ibdiagnet/UFM report flapping ports by repeated LinkDowned within a
    # sweep), and between drops the link retrains and retransmits.
    link_window_seconds: float = 300.0
    # ... and with a link event that recent, activity below this share of the job's baseline is a
    # network stall (a gang paced by a flapping link runs at half speed or less, not at a stop).
    link_degraded_fraction: float = 0.75
    # A gang whose traffic stays below this share of its baseline after a drop it felt, while its
    # links still err or drop, still crawls on the link (retransmissions) past link_window_seconds;
    # one back at this share recovered (a healthy gang's traffic varies a few % step to step).
    link_recovered_fraction: float = 0.9

    # ---- stragglers (peer test)
    # Family-wise error rate of the outlier tests across a gang's members (Bonferroni corrected).
    alpha: float = 0.01
    # Smallest effect that makes a straggler: SM clock 15 % below the gang median (GPU boost
    # clocks vary by a few % between healthy parts; HW slowdown halves them).
    clock_drop: float = 0.15
    # Members needed for a peer test: with fewer, a robust scale cannot be estimated.
    min_peers: int = 4
    # Floor of the robust scale, as a fraction of the median: stops a perfectly uniform gang
    # (MAD = 0) from making noise look significant.
    scale_floor: float = 0.02

    # ---- cluster-wide sanity
    # When at least this share of judged jobs (and at least `outage_min_jobs`) would stall within
    # `outage_spread_seconds` of each other with no shared culprit, the collectors or the network
    # that carries them failed: a thousand jobs do not stall in the same 30 s by chance.
    outage_fraction: float = 0.6
    outage_min_jobs: int = 8
    outage_spread_seconds: float = 30.0
    # Share of a job's GPUs with data needed to judge it.
    min_coverage: float = 0.5


DEFAULT = Thresholds()
