"""The fail-soft scrape wrapper: a raising, hanging or absent collector costs only itself."""

import threading
import time

from collectors.exposition import encode, gauge, iter_samples
from collectors.registry import Collector, Context, NoData
from collectors.scrape import Scraper


class Good(Collector):
    name = "good"

    def collect(self):
        return [gauge("gangwatch_test_value", "A test value.").add(1.5, x='a"b\\c\nd')]


class Broken(Collector):
    name = "broken"

    def collect(self):
        raise ValueError("garbage in /proc")


class Absent(Collector):
    name = "absent"

    def collect(self):
        raise NoData("no such hardware")


class Hangs(Collector):
    name = "hangs"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.release = threading.Event()
        self.calls = 0

    def collect(self):
        self.calls += 1
        self.release.wait(10)
        return []


def samples(text):
    return {(n, tuple(sorted(l.items()))): v for n, l, v in iter_samples(text)}


def test_failures_are_isolated_and_reported():
    ctx = Context()
    hang = Hangs(ctx)
    s = Scraper([Good(ctx), Broken(ctx), Absent(ctx), hang], timeout=0.3, cache_ttl=0)
    t0 = time.monotonic()
    first = s.scrape()
    assert time.monotonic() - t0 < 1.0
    got = samples(first.text)
    ok = lambda c: got[("gangwatch_scrape_collector_success", (("collector", c),))]
    assert ok("good") == 1 and ok("absent") == 1
    assert ok("broken") == 0 and ok("hangs") == 0
    assert got[("gangwatch_scrape_collectors_failed", ())] == 2  # NoData is not a failure
    assert got[("gangwatch_test_value", (("x", 'a"b\\c\nd'),))] == 1.5
    # the hung collector is not called again while it is still stuck
    second = s.scrape()
    assert hang.calls == 1
    assert "still running" in second.outcomes["hangs"].error
    hang.release.set()
    s.close()


def test_collectors_failed_counts_the_raising_collector():
    ctx = Context()
    s = Scraper([Good(ctx), Absent(ctx)], timeout=1.0, cache_ttl=0)
    got = samples(s.scrape().text)
    assert got[("gangwatch_scrape_collectors_failed", ())] == 0  # a real zero: all succeeded
    s.close()
    s = Scraper([Good(ctx), Broken(ctx), Absent(ctx)], timeout=1.0, cache_ttl=0)
    got = samples(s.scrape().text)
    failing = {dict(l)["collector"] for (n, l), v in got.items() if n == "gangwatch_scrape_collector_success" and v == 0}
    assert failing == {"broken"}
    assert got[("gangwatch_scrape_collectors_failed", ())] == len(failing) == 1
    s.close()


def test_concurrent_scrapers_share_one_collection():
    ctx = Context()

    class Slow(Collector):
        name = "slow"

        def collect(self):
            time.sleep(0.2)
            return []

    s = Scraper([Slow(ctx)], timeout=1.0, cache_ttl=0.5)
    threads = [threading.Thread(target=s.scrape) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert s.collections == 1
    s.close()


def test_encode_merges_and_drops_empty():
    a = gauge("gangwatch_x", "X.").add(1, n="1")
    b = gauge("gangwatch_x", "X.").add(2, n="2")
    text = encode([a, b, gauge("gangwatch_empty", "Nothing.")])
    assert text.count("# TYPE gangwatch_x gauge") == 1
    assert "gangwatch_empty" not in text
    assert 'gangwatch_x{n="2"} 2' in text
