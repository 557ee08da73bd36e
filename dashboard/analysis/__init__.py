"""Pure analysis over typed, frozen dataclasses: diagnosis, backfill planning, simulation. Never imports Dash."""
