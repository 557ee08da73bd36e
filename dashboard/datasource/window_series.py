"""Series and inventory for the pages from a diagnosis `Window` (Prometheus, embedded scraper, bundle)."""

from __future__ import annotations

import numpy as np

from dashboard.analysis.diagnose import which_fabric
from dashboard.analysis.findings import finite
from dashboard.analysis.window import LINK_LAYER
from dashboard.datasource.arrays import aggregate_rows, build_network, downsample_cols, nanmean, nansum
from dashboard.datasource.records import CONGESTION, SIGNALS, GpuNow, GpuTopology, Heatmap, Mount, Network, NodeInventory, NodeSeries, Port, Target, signal_label


def _since(win, z: np.ndarray, t0: float, max_cols: int = 240) -> tuple[np.ndarray, np.ndarray]:
    """The window's columns from t0 on, downsampled to at most max_cols."""
    keep = win.times >= t0
    return downsample_cols(win.times[keep], z[:, keep], max_cols)




class WindowSeries:
    """Series for the pages from a diagnosis `Window` (dashboard/analysis/window.py), which every
    metric source builds (Prometheus, embedded scraper, bundle). Mixed into LiveDatasource."""

    _GPU = {"gpu_util": "util", "gpu_sm": "sm", "gpu_power": "power"}
    _RAIL = ("ib_tx", *CONGESTION)
    _NODE = {"io_read": "fs_read", "io_pressure": "psi_io", "eth_pause": "eth_pause", "eth_storm": "eth_storm"}

    def window(self):  # -> Window | None
        return None

    def _judged(self, win) -> tuple[str, np.ndarray | None]:
        """(the fabric the diagnosis judges the window on, the (N, R) mask of the ports the agents
        say are of another one, or None), kept for the window a refresh's pages all ask about (a
        pass over every port's wait: 7 ms at 4,096 nodes). Asked only where it can matter: RoCE's
        counters or the ports' link layers are there."""
        kept = getattr(self, "_fabric_of", None)
        if kept is None or kept[0] is not win:
            fabric = which_fabric(win)[0] if "roce_cong" in win.rail or win.link_layers else "ib"
            kept = self._fabric_of = (win, fabric, win.other_fabric_ports(fabric))
        return kept[1], kept[2]

    def _congestion(self, win) -> str | None:
        """The fabric's congestion signal the window holds, None when neither: RoCE's where the
        diagnosis judges the window RoCE (a RoCE port's PortCounters list a transmit wait too, still
        or PFC's holds only), else InfiniBand's first."""
        held = [s for s in CONGESTION if s in win.rail]
        if "roce_cong" in held and self._judged(win)[0] == "roce":
            return "roce_cong"
        return next(iter(held), None)

    def _rail(self, win, signal: str) -> np.ndarray | None:
        """A rail signal (N x R x T) over the fabric's ports: another fabric's (a DGX's RoCE
        storage NICs, which hang off the storage network's switches) NaN, out of every sum."""
        a = win.rail.get(signal)
        other = self._judged(win)[1] if a is not None else None
        if other is None or a.shape[:2] != other.shape:
            return a
        return self._memo.get(f"rail:{signal}", (id(win), win.end),
                              lambda: np.where(other[:, :, None], a.dtype.type(np.nan), a))

    def _node_rows(self, win, signal: str, rows: list[int], gpu_cols: list[list[int]] | None = None) -> np.ndarray | None:
        """(len(rows) x T) node-level values of a signal in display units, None when absent."""
        sig = SIGNALS[signal]
        if signal in self._GPU:
            a = win.gpu.get(self._GPU[signal])
            if a is None:
                return None
            if gpu_cols is None:
                z = nanmean(a[rows], axis=1)
            else:
                z = np.vstack([nanmean(a[r][cols], axis=0) if cols else np.full(a.shape[2], np.nan)
                               for r, cols in zip(rows, gpu_cols)]) if rows else np.zeros((0, a.shape[2]))
        elif signal in self._RAIL:
            a = self._rail(win, signal)
            if a is None:
                return None
            z = nansum(a[rows], axis=1)
        else:
            a = win.node.get(self._NODE.get(signal, ""))
            if a is None:
                return None
            z = a[rows]
        return z.astype(np.float64) * sig.scale

    def heatmap(self, signal="gpu_util", window=3600.0, max_rows=400, max_cols=240):
        win = self.window()
        if win is None or not win.nodes:
            return None
        z = self._node_rows(win, signal, list(range(len(win.nodes))))
        if z is None:
            return None
        times, z = _since(win, z, win.end - window, max_cols)
        labels, members, zz = aggregate_rows(list(win.nodes), z, max_rows)
        return Heatmap(signal, labels, members, times, zz, len(win.nodes), signal_label(signal, self._congestion(win)))

    def job_series(self, jobid, signal, window=3600.0, max_cols=240):
        win, snap = self.window(), self.snapshot()
        job = snap.job(int(jobid)) if snap is not None and str(jobid).isdigit() else None
        if win is None or job is None or not job.nodes:
            return None
        index = win.node_index()
        names = [n for n in job.nodes if n in index]
        if not names:
            return None
        rows = [index[n] for n in names]
        allocs = {a.node: a.gpu_indices for a in job.allocations}
        cols = [[c for c in (win.gpu_column(r, g) for g in allocs.get(n, ())) if c >= 0] or None for n, r in zip(names, rows)]
        z = self._node_rows(win, signal, rows, cols if all(c is not None for c in cols) else None)
        if z is None:
            return None
        times, z = _since(win, z, max(win.end - window, (job.start_time or 0) - 300), max_cols)
        return Heatmap(signal, tuple(names), tuple((n,) for n in names), times, z, len(names),
                       signal_label(signal, self._congestion(win)))

    def node_series(self, node, signals, window=3600.0):
        win = self.window()
        if win is None or node not in win.node_index():
            return None
        i = win.node_index()[node]
        keep = win.times >= win.end - window
        values, chans = {}, {}
        cong = self._congestion(win)
        for s in signals:
            sig = SIGNALS[s]
            if s in CONGESTION and s != cong:
                continue  # the other fabric's (a RoCE port's still or PFC-only transmit wait) is not shown
            if s in self._GPU and self._GPU[s] in win.gpu:
                cols = [k for k, g in enumerate(win.gpus[i]) if g >= 0] if win.gpus else []
                values[s] = win.gpu[self._GPU[s]][i][cols][:, keep].astype(np.float64) * sig.scale
                chans[s] = tuple(f"GPU {win.gpus[i][k]}" for k in cols)
            elif s in self._RAIL and s in win.rail:
                other = self._judged(win)[1]
                cols = [k for k, r in enumerate(win.rails[i]) if r and (other is None or not other[i, k])] if win.rails else []
                values[s] = win.rail[s][i][cols][:, keep].astype(np.float64)
                chans[s] = tuple(win.rails[i][k] for k in cols)
            elif s in self._NODE:
                z = self._node_rows(win, s, [i])
                if z is not None:
                    values[s], chans[s] = z[:, keep], (node,)
        return NodeSeries(node, win.times[keep], values, chans, {s: signal_label(s, cong) for s in values}) if values else None

    def ost_series(self, window=3600.0):
        win = self.window()
        a = win.target.get("read") if win is not None else None
        if a is None or not win.targets:
            return None
        times, z = _since(win, nansum(a, axis=0).astype(np.float64), win.end - window)
        return Heatmap("io_read", tuple(win.targets), tuple((t,) for t in win.targets), times, z, len(win.targets))

    def leaf_series(self, window=3600.0):
        win = self.window()
        signal = self._congestion(win) if win is not None else None
        if signal is None or not win.leaf_of:
            return None
        per_node = nansum(self._rail(win, signal), axis=1)
        leaves = sorted(set(win.leaf_of.values()))
        z = np.vstack([nansum(per_node[[k for k, n in enumerate(win.nodes) if win.leaf_of.get(n) == lf]], axis=0)
                       for lf in leaves]).astype(np.float64)
        times, z = _since(win, z, win.end - window)
        return Heatmap(signal, tuple(leaves), tuple((lf,) for lf in leaves), times, z, len(leaves))

    def leaf_of(self, node: str) -> str:
        """The switch the metric source labels the node with, else Slurm's topology/tree."""
        win = self.window()
        return (win.leaf_of.get(node, "") if win is not None else "") or super().leaf_of(node)

    @staticmethod
    def _last(a: np.ndarray) -> np.ndarray:
        """The latest column of (... x T), as float64 (NaN where unknown)."""
        return a[..., -1].astype(np.float64) if a.shape[-1] else np.full(a.shape[:-1], np.nan)

    def gpu_topology(self, node):
        win = self.window()
        if win is None:
            return GpuTopology()
        peers, numa = win.nvlink_peers.get(node), win.gpu_numa.get(node)
        return GpuTopology(peers if peers else None, dict(numa) if numa else None)

    def network(self):
        win = self.window()
        if win is None or not win.rails or "ib_tx" not in win.rail:
            return None
        return self._memo.get("network", (id(win), win.end), lambda: self._network(win))

    def _network(self, win) -> Network:
        leaves = sorted(set(win.leaf_of.values()))
        pos = {lf: k for k, lf in enumerate(leaves)}
        leaf_idx = np.array([pos.get(win.leaf_of.get(n, ""), -1) for n in win.nodes])
        valid = np.array([[bool(r) for r in rails] for rails in win.rails])
        other = self._judged(win)[1]
        left_out = ""
        if other is not None and other.shape == valid.shape:
            n = int((valid & other).sum())
            own = LINK_LAYER[self._judged(win)[0]]
            layers = sorted({layer for node in win.link_layers.values() for layer in node.values()} - {own})
            left_out = (f" {n:,} RDMA ports of another link layer ({', '.join(layers)}: storage or front-end NICs) are "
                        "left out: they hang off other switches; each node's page lists them.")
            valid &= ~other
        tx = self._last(win.rail["ib_tx"])
        signal = self._congestion(win)
        wait = self._last(win.rail[signal]) if signal else np.full(tx.shape, np.nan)

        def port(i, k):
            node = win.nodes[i]
            return Port(node, win.rails[i][k], win.leaf_of.get(node, ""), None, None, finite(tx[i, k]), finite(wait[i, k]))

        net = build_network(leaf_idx, leaves, valid, tx, wait, port)
        return Network(net.switches, net.ports, net.total_ports, "Port state and error counters are not in the metric "
                       "window: unknown. Per-switch figures are sums over the switch's nodes' ports." + left_out, signal or "ib_wait")

    def storage_targets(self):
        win = self.window()
        if win is None or not win.targets or not win.target:
            return None
        return self._memo.get("targets", (id(win), win.end), lambda: self._targets(win))

    def _targets(self, win) -> tuple[Target, ...]:
        got = {k: self._last(a) for k, a in win.target.items()}  # nodes x targets

        def col(key, j, mean=False):
            a = got.get(key)
            if a is None or not np.isfinite(a[:, j]).any():
                return None
            return float(np.nanmean(a[:, j]) if mean else np.nansum(a[:, j]))

        out = []
        for j, name in enumerate(win.targets):
            fs, _, tail = name.rpartition("-")
            kind = "MDT" if tail.startswith("MDT") else ("OST" if tail.startswith("OST") else "NSD")
            out.append(Target(fs or name, name, kind, col("read", j), col("write", j), None, col("latency", j, True)))
        return tuple(out)

    def node_inventory(self, node):
        win = self.window()
        if win is None or node not in win.node_index():
            return None
        i = win.node_index()[node]
        gpus = None
        if win.gpus and "util" in win.gpu:
            util = self._last(win.gpu["util"][i])
            power = self._last(win.gpu["power"][i]) if "power" in win.gpu else np.full(util.shape, np.nan)
            gpus = tuple(GpuNow(g, finite(util[k]), finite(power[k])) for k, g in enumerate(win.gpus[i]) if g >= 0)
        ports, signal, other_ports, other_signal = None, self._congestion(win), (), ""
        if win.rails and "ib_tx" in win.rail:
            tx = self._last(win.rail["ib_tx"][i])
            wait = self._last(win.rail[signal][i]) if signal else np.full(tx.shape, np.nan)
            other = self._judged(win)[1]
            off = other[i] if other is not None and i < other.shape[0] else np.zeros(tx.shape, bool)
            layers = win.link_layers.get(node, {})
            ports = tuple(Port(node, r, win.leaf_of.get(node, ""), None, None, finite(tx[k]), finite(wait[k]),
                               link_layer=layers.get(r, "")) for k, r in enumerate(win.rails[i]) if r and not off[k])
            if off.any():
                # their own fabric's congestion: a RoCE storage port's ECN marks + CNPs
                other_signal = next((c for c in CONGESTION if c != signal and c in win.rail), "")
                own = self._last(win.rail[other_signal][i]) if other_signal else np.full(tx.shape, np.nan)
                other_ports = tuple(Port(node, r, "", None, None, finite(tx[k]), finite(own[k]), link_layer=layers.get(r, ""))
                                    for k, r in enumerate(win.rails[i]) if r and off[k])
        fs = None
        if win.targets and "read" in win.target:
            read = self._last(win.target["read"][i])
            write = self._last(win.target["write"][i]) if "write" in win.target else np.full(read.shape, np.nan)
            by_fs: dict[str, list[int]] = {}
            for j, t in enumerate(win.targets):
                by_fs.setdefault(t.rpartition("-")[0] or t, []).append(j)
            fs = tuple(Mount(name, "lustre", len(js), None,
                             finite(np.nansum(read[js])) if np.isfinite(read[js]).any() else None,
                             finite(np.nansum(write[js])) if np.isfinite(write[js]).any() else None)
                       for name, js in sorted(by_fs.items()))
        return NodeInventory(node, gpus, ports, fs, None, self.gpu_topology(node),
                             "Disks and local filesystems are not in the metric window: unknown.", signal or "ib_wait",
                             other_ports, other_signal)
