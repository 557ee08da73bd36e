"""Every component id of the dashboard, page-prefixed kebab-case, in one place (tests check uniqueness)."""

# ---- shell (app.py)
URL = "app-url"
NAV_URL = "app-nav-url"  # written by callbacks to navigate (refresh="callback-nav")
PAGE = "app-page"
REFRESH = "app-refresh"
THEME = "app-theme"
THEME_TOGGLE = "app-theme-toggle"
THEME_SINK = "app-theme-sink"
BANNER = "app-banner"
AGE = "app-data-age"
SIM_BADGE = "app-sim-badge"
NAV = "app-nav"
RENDERED = "app-rendered"  # the path whose page the layout holds (rendered on the server)

# ---- overview
OV_CARDS = "overview-cards"
OV_INCIDENTS = "overview-incidents"
OV_HEATMAP = "overview-heatmap"  # the interactive figure's box, once mounted
OV_HEATMAP_GRAPH = "overview-heatmap-graph"  # pattern-matching type of the figure itself
OV_HEATMAP_BOX = "overview-heatmap-box"  # holds the image preview, then the interactive figure
OV_FLAGGED = "overview-flagged"
OV_VERSION = "overview-version"
OV_HEATMAP_VERSION = "overview-heatmap-version"
OV_FINDINGS_SOURCE = "overview-findings-source"

# ---- jobs
JOBS_TABLE = "jobs-table"
JOBS_SEARCH = "jobs-search"
JOBS_STATE = "jobs-state"
JOBS_FLAGGED = "jobs-flagged"
JOBS_COUNT = "jobs-count"

# ---- job
JOB_ID = "job-id"
JOB_SUMMARY = "job-summary"
JOB_VERDICT = "job-verdict"
JOB_HEATMAPS = "job-heatmaps"
JOB_EVIDENCE = "job-evidence"
JOB_PLACEMENT = "job-placement"
JOB_WHY = "job-why"
JOB_PROBE_BUTTON = "job-probe-button"
JOB_PROBE_RESULT = "job-probe-result"

# ---- nodes
NODES_TABLE = "nodes-table"
NODES_SEARCH = "nodes-search"
NODES_STATE = "nodes-state"
NODES_COUNTS = "nodes-counts"

# ---- node
NODE_NAME = "node-name"
NODE_SUMMARY = "node-summary"
NODE_JOBS = "node-jobs"
NODE_GRAPHS = "node-graphs"
NODE_INVENTORY = "node-inventory"
NODE_GPUS = "node-gpus"
NODE_PORTS = "node-ports"
NODE_FILESYSTEMS = "node-filesystems"
NODE_DISKS = "node-disks"

# ---- queue
QUEUE_PLAN = "queue-plan"
QUEUE_FREED = "queue-freed"
QUEUE_TIMELINE = "queue-timeline"
QUEUE_WHY = "queue-why"
QUEUE_RESERVATIONS = "queue-reservations"
QUEUE_DEPS = "queue-deps"
QUEUE_FAIRSHARE = "queue-fairshare"

# ---- storage / network
STORAGE_HEATMAP = "storage-heatmap"
STORAGE_TOP = "storage-top"
NETWORK_HEATMAP = "network-heatmap"
NETWORK_GANGS = "network-gangs"
NETWORK_TABLES = "network-tables"
NETWORK_SWITCHES = "network-switches"
NETWORK_PORTS = "network-ports"
STORAGE_TARGETS = "storage-targets"

# Kubernetes (/kubernetes)
KUBE_SCHEDULER = "kubernetes-scheduler"
KUBE_CONTENT = "kubernetes-content"
KUBE_GANGS = "kubernetes-gangs"
