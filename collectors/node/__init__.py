"""One module per node collector; each registers itself with `collectors.registry.register`."""
