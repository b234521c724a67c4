"""Nexus: the Textual workbench over an in-process TRACE (``trace_core``)."""
