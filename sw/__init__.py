"""ISA, assembler, kernel-program generators and the driver API."""
