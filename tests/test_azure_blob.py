"""Azure Blob (adlfs on a real Azurite): errors are typed and name the blob; the
publisher registry finds the object stores by protocol without the World importing them."""

from __future__ import annotations

import importlib
import os
import tomllib

import pytest

import fs_adapters.azure_blob  # noqa: F401  (registers its publisher)
import little_workflow as lw
from little_workflow.world.publish import Publisher, publisher_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_wrong_account_key_is_a_clear_error_naming_the_blob(azurite):
    container = azurite.new_container()
    wrong = azurite.connection_string.replace("AccountKey=Eby8", "AccountKey=Xby8")
    # Opening the World reads its run catalogue's marker: the first request is refused.
    with pytest.raises(lw.StorageError, match=rf"az://{container}/wf/catalogue/.*access denied.*"
                                              r"HTTP 403.*credentials"):
        lw.virtual_world(azurite.filesystem(connection_string=wrong), f"{container}/wf")


def test_a_missing_container_is_named(azurite):
    # Opening the World reads its run catalogue's marker: a missing container is named there.
    with pytest.raises(lw.StorageError, match="container 'lw-no-such-container' does not exist"):
        lw.virtual_world(azurite.filesystem(), "lw-no-such-container/wf")


def test_a_second_host_loses_the_race_for_a_sequence_and_reads_the_winner(azurite):
    container = azurite.new_container()
    a = lw.virtual_world(azurite.filesystem(), f"{container}/wf")
    b = lw.virtual_world(azurite.filesystem(), f"{container}/wf")  # another host
    a.append_event("run_az", "t", {"by": "a"})
    b.append_event("run_az", "t", {"by": "b"})  # learns of a's event 1, takes 2
    assert [(e.sequence, e.payload["by"]) for e in a.list_events("run_az")] == [(1, "a"), (2, "b")]


def test_every_publisher_entry_point_names_a_publisher_for_its_protocol():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        table = tomllib.load(f)["project"]["entry-points"]["little_workflow.publishers"]
    assert {"s3", "abfs", "az"} <= set(table)
    for target in table.values():
        module, _, name = target.partition(":")
        factory = getattr(importlib.import_module(module), name)
        assert issubclass(factory, Publisher), target


def test_an_azure_world_uses_the_registered_publisher(azurite):
    assert type(publisher_for(azurite.filesystem())).__name__ == "AzureBlobPublisher"
