"""Kernel-program generators (each paired with a checker, STYLE.md 7).

A kernel module builds programs from the machine configuration only — ranks,
AIVs, topology — never from data, and checks a finished run.
"""
