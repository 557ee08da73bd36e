#!/usr/bin/env python3
"""Device check, for a machine with an NVIDIA GPU (not part of pytest: CI has no GPU).

Starts the real agent (`python -m dashboard.cli agent --web.listen-address 127.0.0.1:<free port>`),
scrapes /metrics a few times over ~2-6 s (GPM profiling needs two scrapes; the first scrape may
still be initialising NVML), and checks the GPU series for presence and sane ranges: utilisation
ratios 0-1, temperatures 0-120 C, power 0-1500 W, memory used <= total, clocks > 0, info series for
every GPU NVML counts, no GPU lost or missing, scrape success 1. Prints a PASS/FAIL/WARN/SKIP table;
exit code 0 when nothing FAILs, 1 otherwise, 2 when the agent could not be started or scraped.

Standard library only (the agent itself needs `pynvml` from nvidia-ml-py). Usage:

    python tests/gpu_device_check.py [--save scrape.prom] [--scrapes 3]

With $OUT set (the device tool's output folder), the last scrape is saved there as gpu-scrape.prom.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), value))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str, timeout: float = 10.0) -> tuple[str, float]:
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body = resp.read().decode()
    return body, time.monotonic() - t0


class Report:
    def __init__(self):
        self.rows: list[tuple[str, str, str]] = []

    def add(self, status: str, check: str, detail: str = "") -> None:
        self.rows.append((status, check, detail))

    def check(self, ok: bool, check: str, detail: str = "", warn_only: bool = False) -> None:
        self.add("PASS" if ok else ("WARN" if warn_only else "FAIL"), check, detail)

    def print(self) -> int:
        width = max((len(c) for _, c, _ in self.rows), default=10)
        print(f"{'STATUS':6}  {'CHECK':{width}}  DETAIL")
        for status, check, detail in self.rows:
            print(f"{status:6}  {check:{width}}  {detail}")
        fails = sum(1 for s, _, _ in self.rows if s == "FAIL")
        print(f"\n{len(self.rows)} checks: {fails} FAIL, {sum(1 for s, _, _ in self.rows if s == 'WARN')} WARN, "
              f"{sum(1 for s, _, _ in self.rows if s == 'SKIP')} SKIP -> {'FAIL' if fails else 'PASS'}")
        return 1 if fails else 0


def in_range(samples, name: str, lo: float, hi: float, rep: Report, what: str, required: bool = True,
             match: dict | None = None) -> None:
    vals = [(l, v) for n, l, v in samples if n == name and all(l.get(k) == w for k, w in (match or {}).items())]
    if not vals:
        rep.add("FAIL" if required else "SKIP", f"{what} present", f"no {name}" + (f"{match}" if match else ""))
        return
    bad = [(l.get("gpu"), v) for l, v in vals if not lo <= v <= hi]
    shown = ", ".join(f"gpu{l.get('gpu')}={v:g}" for l, v in vals[:8])
    rep.check(not bad, f"{what} in [{lo:g}, {hi:g}]", f"out of range: {bad}" if bad else shown)


def checks(samples, rep: Report, first_duration: float, durations: list[float]) -> None:
    def get(name, **match):
        return [(l, v) for n, l, v in samples if n == name and all(l.get(k) == str(w) for k, w in match.items())]

    success = {l.get("collector"): v for l, v in get("gangwatch_scrape_collector_success")}
    rep.check(success.get("gpu") == 1, "scrape success gpu == 1", f"got {success.get('gpu')}")
    prof_ok = success.get("gpuprof")
    rep.check(prof_ok == 1, "scrape success gpuprof == 1", f"got {prof_ok} (0 = failed, see agent log)",
              warn_only=True)
    n_nvml = get("gangwatch_gpu_nvml_devices")
    count = int(n_nvml[0][1]) if n_nvml else 0
    rep.check(count > 0, "NVML sees at least one GPU", f"gangwatch_gpu_nvml_devices={count}")
    info = get("gangwatch_gpu_info")
    rep.check(len(info) == count and count > 0, "gangwatch_gpu_info for every GPU",
              "; ".join(f"gpu{l.get('gpu')} {l.get('name')} {l.get('pci_bus_id')} mig={l.get('mig_mode')} "
                        f"driver={l.get('driver_version')}" for l, _ in info[:8]))
    rep.check(all(l.get("uuid", "").startswith("GPU-") for l, _ in info) and bool(info), "info has UUIDs")
    lost = [l.get("gpu") for l, v in get("gangwatch_gpu_lost") if v != 0]
    rep.check(not lost and len(get("gangwatch_gpu_lost")) == count, "no GPU lost", f"lost: {lost}")
    missing = get("gangwatch_gpu_missing")
    pci = get("gangwatch_gpu_pci_devices")
    if missing:
        rep.check(missing[0][1] == 0, "no GPU missing from the PCI bus",
                  f"pci={pci[0][1] if pci else '?'} nvml={count} missing={missing[0][1]}")
    else:
        rep.add("SKIP", "no GPU missing from the PCI bus", "PCI device list unreadable here")
    mig_on = {l.get("gpu") for l, _ in info if l.get("mig_mode") == "enabled"}
    in_range(samples, "gangwatch_gpu_utilization_ratio", 0, 1, rep, "GPU utilisation ratio", required=not mig_on)
    in_range(samples, "gangwatch_gpu_memory_utilization_ratio", 0, 1, rep, "memory utilisation ratio",
             required=not mig_on)
    in_range(samples, "gangwatch_gpu_temperature_celsius", 0, 120, rep, "GPU temperature C", match={"sensor": "gpu"})
    in_range(samples, "gangwatch_gpu_temperature_celsius", 0, 120, rep, "memory temperature C", required=False,
             match={"sensor": "memory"})
    in_range(samples, "gangwatch_gpu_power_watts", 0, 1500, rep, "power W")
    in_range(samples, "gangwatch_gpu_energy_joules_total", 1e-9, 1e15, rep, "energy J > 0")
    for clock in ("sm", "memory", "graphics"):
        in_range(samples, "gangwatch_gpu_clock_hz", 1, 10e9, rep, f"{clock} clock Hz > 0", match={"clock": clock})
    used = {l.get("gpu"): v for l, v in get("gangwatch_gpu_memory_used_bytes")}
    total = {l.get("gpu"): v for l, v in get("gangwatch_gpu_memory_total_bytes")}
    free = {l.get("gpu"): v for l, v in get("gangwatch_gpu_memory_free_bytes")}
    rep.check(bool(total) and all(g in used and 0 <= used[g] <= t and t > 0 for g, t in total.items()),
              "memory 0 <= used <= total, total > 0",
              ", ".join(f"gpu{g}: {used.get(g, float('nan')) / 2**30:.1f}/{t / 2**30:.1f} GiB" for g, t in total.items()))
    rep.check(all(free.get(g, 0) <= t for g, t in total.items()), "memory free <= total")
    in_range(samples, "gangwatch_gpu_performance_state", 0, 15, rep, "performance state P0-P15", required=False)
    in_range(samples, "gangwatch_gpu_clock_throttle_reason", 0, 1, rep, "clock event reasons 0/1")
    in_range(samples, "gangwatch_gpu_ecc_errors_total", 0, 1e12, rep, "ECC counts >= 0", required=False)
    in_range(samples, "gangwatch_gpu_remapped_rows", 0, 1e6, rep, "remapped rows >= 0", required=False)
    in_range(samples, "gangwatch_gpu_pcie_throughput_bytes_per_second", 0, 1e12, rep, "PCIe B/s >= 0", required=False)
    in_range(samples, "gangwatch_gpu_pcie_replays_total", 0, 1e12, rep, "PCIe replays >= 0", required=False)
    in_range(samples, "gangwatch_gpu_compute_processes", 0, 10000, rep, "compute processes >= 0")
    in_range(samples, "gangwatch_gpu_nvlink_up", 0, 1, rep, "NVLink link state 0/1", required=False)
    in_range(samples, "gangwatch_gpu_fan_speed_ratio", 0, 1.5, rep, "fan speed ratio", required=False)
    topo = get("gangwatch_gpu_topology_info")
    rep.add("PASS" if topo or count < 2 else "FAIL", "topology info for GPU pairs",
            f"{len(topo)} pairs" if count >= 2 else "single GPU: no pairs")
    aff = get("gangwatch_gpu_affinity_info")
    rep.check(bool(aff), "CPU/NUMA affinity info", "; ".join(f"gpu{l.get('gpu')} numa={l.get('numa_node')} "
                                                           f"cpus={l.get('cpus')}" for l, _ in aff[:4]), warn_only=True)
    # profiling: present on Hopper+ (GPM) or under DCGM; a GPU without GPM leaves them out
    src = [l.get("source") for l, _ in get("gangwatch_gpu_prof_source_info")]
    prof_names = ("gangwatch_gpu_prof_sm_active_ratio", "gangwatch_gpu_prof_sm_occupancy_ratio",
                  "gangwatch_gpu_prof_graphics_engine_active_ratio", "gangwatch_gpu_prof_dram_active_ratio",
                  "gangwatch_gpu_prof_tensor_active_ratio")
    if not src:
        rep.add("SKIP", "GPU profiling (GPM/DCGM)", "no gangwatch_gpu_prof_source_info: no GPM-capable GPU")
    else:
        rep.add("PASS", "GPU profiling source", ",".join(src))
        for name in prof_names:
            in_range(samples, name, 0, 1.0001, rep, name.replace("gangwatch_gpu_prof_", "prof "))
        in_range(samples, "gangwatch_gpu_prof_nvlink_bytes_per_second", 0, 1e13, rep, "prof NVLink B/s",
                 required=False)
        in_range(samples, "gangwatch_gpu_prof_pcie_bytes_per_second", 0, 1e12, rep, "prof PCIe B/s", required=False)
    errors = get("gangwatch_gpu_nvml_errors_total")
    rep.check(not errors, "no NVML call errors (besides NotSupported)",
              "; ".join(f"{l.get('call')}:{l.get('error')}={v:g}" for l, v in errors), warn_only=True)
    durs = {l.get("collector"): v for l, v in get("gangwatch_scrape_collector_duration_seconds")}
    rep.check(durs.get("gpu", 9) < 0.5, "gpu collector duration < 0.5 s (steady state)",
              f"gpu={durs.get('gpu')} gpuprof={durs.get('gpuprof')}; first scrape took {first_duration:.3f} s, "
              f"later {', '.join(f'{d:.3f}' for d in durations)} s", warn_only=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scrapes", type=int, default=3, help="Scrapes to take, 2 s apart (the last is checked).")
    ap.add_argument("--save", default=None, help="Write the last scrape here.")
    ap.add_argument("--startup-timeout", type=float, default=20.0)
    args = ap.parse_args(argv)
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "dashboard.cli", "agent", "--web.listen-address", f"127.0.0.1:{port}"]
    log_path = Path(os.environ.get("OUT") or "/tmp") / "gpu-agent.log"
    url = f"http://127.0.0.1:{port}/metrics"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + args.startup_timeout
            first = None
            while first is None:
                if proc.poll() is not None or time.monotonic() > deadline:
                    print(f"agent did not start ({' '.join(cmd)}); log {log_path}:\n{log_path.read_text()[-3000:]}")
                    return 2
                try:
                    first = scrape(url)
                except OSError:
                    time.sleep(0.2)
            later = []
            body = first[0]
            for _ in range(max(1, args.scrapes - 1)):
                time.sleep(2.0)  # past the agent's 1 s cache, so each scrape is a fresh collection
                body, took = scrape(url)
                later.append(took)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    save = args.save or (os.path.join(os.environ["OUT"], "gpu-scrape.prom") if os.environ.get("OUT") else None)
    if save:
        Path(save).write_text(body)
        print(f"last scrape saved to {save}; agent log in {log_path}")
    rep = Report()
    checks(parse(body), rep, first[1], later)
    return rep.print()


if __name__ == "__main__":
    sys.exit(main())
