"""Ten concurrent scrapers against one real agent on the fixture trees.

Each gets a valid, complete exposition every time (the same metric families as a lone scrape, every
collector's success series, the text parses), and they share collections: with the default
`--scrape.cache-ttl` of 1 s, the number of collections follows the wall clock, not the request count.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import threading
import time

from collectors.exposition import iter_samples
from tests.test_agent_e2e import Agent, fixture_root  # noqa: F401 - fixture_root is a fixture

SCRAPERS = 10
SCRAPES_EACH = 15
HEADERS = {"Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                     "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
           "Accept-Encoding": "gzip"}


def families(text: str) -> set[str]:
    return {line.split(" ", 3)[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def collections(text: str) -> float:
    return next(v for n, _, v in iter_samples(text) if n == "gangwatch_scrape_collections_total")


def test_ten_scrapers_get_complete_expositions_and_share_collections(fixture_root):  # noqa: F811
    agent = Agent(fixture_root / "proc", fixture_root / "sys", fixture_root)
    try:
        reference, _ = agent.scrape()
        want = families(reference)
        collectors = {l["collector"] for n, l, _ in iter_samples(reference) if n == "gangwatch_scrape_collector_success"}
        assert len(want) > 20 and "cpu" in collectors
        start_collections = collections(reference)

        bodies: dict[str, str] = {}
        problems: list[str] = []
        lock = threading.Lock()
        gate = threading.Barrier(SCRAPERS)

        def scraper(i: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", agent.port, timeout=10)
            gate.wait()
            try:
                for _ in range(SCRAPES_EACH):
                    conn.request("GET", "/metrics", headers=HEADERS)
                    resp = conn.getresponse()
                    raw = resp.read()
                    if resp.status != 200 or resp.getheader("Content-Encoding") != "gzip":
                        with lock:
                            problems.append(f"scraper {i}: {resp.status} {resp.getheaders()}")
                        continue
                    text = gzip.decompress(raw).decode()
                    with lock:
                        bodies.setdefault(hashlib.sha256(raw).hexdigest(), text)
            except Exception as exc:  # reported below with the scraper's number
                with lock:
                    problems.append(f"scraper {i}: {type(exc).__name__}: {exc}")
            finally:
                conn.close()

        t0 = time.monotonic()
        threads = [threading.Thread(target=scraper, args=(i,)) for i in range(SCRAPERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        elapsed = time.monotonic() - t0
        assert not problems, problems

        # Every distinct body is a whole exposition: it parses, ends with a newline and holds every family.
        for text in bodies.values():
            assert text.endswith("\n")
            samples = list(iter_samples(text))
            assert families(text) == want
            got = {l["collector"] for n, l, _ in samples if n == "gangwatch_scrape_collector_success"}
            assert got == collectors

        final, _ = agent.scrape()
        ran = collections(final) - start_collections
        requests = SCRAPERS * SCRAPES_EACH
        # one collection per cache TTL (1 s) of wall time at most, plus the one in flight at each end
        assert ran <= elapsed / 1.0 + 2, (ran, elapsed)
        assert ran < requests / 5, (ran, requests)
        assert len(bodies) <= ran + 1  # identical bytes served to everyone within one collection
    finally:
        agent.stop()
