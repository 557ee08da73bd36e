"""The scrape's runner pool: one hand-off per scrape, widening only when a collector is slow or stuck.

tests/test_scrape_framework.py holds the fail-soft contract; these pin down how the pool keeps it:
a collector hung at the head of the queue does not starve the ones behind it, a collector that was
slow starts on its own runner, and repeated scrapes past a hung collector do not pile up threads.
"""

from __future__ import annotations

import threading
import time

from collectors.exposition import gauge, iter_samples
from collectors.registry import Collector, Context
from collectors.scrape import Scraper


def make(name: str, collect) -> Collector:
    cls = type(f"C_{name}", (Collector,), {"name": name, "collect": lambda self: collect()})
    return cls(Context())


def quick(name: str) -> Collector:
    return make(name, lambda: [gauge(f"gangwatch_test_{name}", "A test value.").add(1)])


def success(text: str) -> dict[str, float]:
    return {l["collector"]: v for n, l, v in iter_samples(text) if n == "gangwatch_scrape_collector_success"}


def test_a_hang_at_the_head_of_the_queue_delays_the_rest_by_one_spread_interval():
    release = threading.Event()
    s = Scraper([make("hangs", lambda: release.wait(10) and []), quick("a"), quick("b")],
                timeout=0.5, cache_ttl=0, spread_after=0.05)
    try:
        t0 = time.monotonic()
        first = s.scrape()
        assert time.monotonic() - t0 < 0.9
        assert success(first.text) == {"hangs": 0, "a": 1, "b": 1}
        assert "timed out" in first.outcomes["hangs"].error
    finally:
        release.set()
        s.close()


def test_repeated_scrapes_past_a_hung_collector_do_not_pile_up_threads():
    release = threading.Event()
    calls = []

    def hang():
        calls.append(1)
        release.wait(10)
        return []

    s = Scraper([make("hangs", hang), quick("a")], timeout=0.2, cache_ttl=0, spread_after=0.02)
    try:
        s.scrape()
        before = threading.active_count()
        for _ in range(5):
            out = s.scrape()
            assert success(out.text) == {"hangs": 0, "a": 1}
            assert "still running" in out.outcomes["hangs"].error
        assert len(calls) == 1
        assert threading.active_count() <= before + 1
        release.set()
        deadline = time.monotonic() + 5
        while s._busy and time.monotonic() < deadline:
            time.sleep(0.01)
        assert success(s.scrape().text) == {"hangs": 1, "a": 1}  # back once it returned
        assert len(calls) == 2
    finally:
        release.set()
        s.close()


def test_quick_collectors_share_one_runner_and_slow_ones_get_their_own():
    threads: dict[str, str] = {}

    def record(name, delay=0.0):
        def collect():
            threads[name] = threading.current_thread().name + str(threading.get_ident())
            time.sleep(delay)
            return []
        return make(name, collect)

    s = Scraper([record("slow", 0.15), record("a"), record("b")], timeout=1.0, cache_ttl=0, spread_after=0.1)
    try:
        s.scrape()  # learns that "slow" is slow
        threads.clear()
        s.scrape()
        assert threads["a"] == threads["b"]  # one hand-off for the quick ones
        assert threads["slow"] != threads["a"]  # started at once on its own runner, not ahead of them
    finally:
        s.close()


def test_close_ends_the_idle_runners():
    s = Scraper([quick("a"), quick("b")], cache_ttl=0)
    s.scrape()
    runners = [t for t in threading.enumerate() if t.name == "collector-runner"]
    assert runners
    s.close()
    for t in runners:
        t.join(2)
    # runners of other tests' scrapers may remain; ours are gone
    assert not any(t.is_alive() for t in runners)
