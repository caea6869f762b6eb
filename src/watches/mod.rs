//! watches.yaml: loading, defaults, validation and per-kind settings.
