"""Filesystem bridges: PyFilesystem2, object stores, just-bash views."""
