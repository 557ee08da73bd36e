"""`python -m tests.support.agent_fsfakes <agent flags>`: the real `gangwatch agent`, with the
filesystem collector's statvfs replaced by tests.support.fsfakes (a mount named `slow*` blocks
while `<mount>.block` exists). The stat function is a test hook (an option, not a flag), so this
launcher sets it before the agent builds its collectors; everything else is the shipped agent."""

import sys

from collectors import agent

_build = agent.build_scraper


def build_scraper(args, *a, **kw):
    args.collector_filesystem_stat_function = "tests.support.fsfakes:statvfs"
    return _build(args, *a, **kw)


agent.build_scraper = build_scraper

if __name__ == "__main__":
    sys.exit(agent.main(sys.argv[1:]))
