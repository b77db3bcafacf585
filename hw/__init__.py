"""Hardware blocks (Amaranth components). See DESIGN.md "Blocks"."""
