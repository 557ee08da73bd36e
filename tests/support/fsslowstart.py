"""A stat function whose module takes a second to import: a prober child that is slow to start
(a loaded node) must not be mistaken for a wedged one. Named `tests.support.fsslowstart:statvfs`."""

import os
import time

time.sleep(1.0)
statvfs = os.statvfs
