"""One module per dashboard page: `layout(ds, ctx, **params)` and `register(app, ds, ctx)`."""
