"""Hardware blocks (Amaranth components). See docs/spec/design.md "Blocks"."""
