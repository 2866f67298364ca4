"""What a run and an idle sweep cost on Azure Blob, request by request (counted against
Azurite): listing a prefix is one List Blobs request, not the two adlfs's `ls` sends
(the prefix without its slash, to find a blob of that name, then with it) nor the three
of an empty prefix (then a Get Blob Properties and a one-result listing too)."""

from __future__ import annotations

from azurite_server import RequestCounter

import little_workflow as lw
from fs_adapters.azure_blob import AzureBlobPublisher

#: As on S3 (tests/test_s3_request_counts.py): the same writes and reads, one request each.
RUN_REQUESTS = 32


@lw.workflow(id="az-req-steps")
async def steps(ctx: lw.RunContext, input: dict) -> int:
    return sum([await ctx.step(f"s{i}", lambda i=i: i) for i in range(input["steps"])])


def test_listing_a_prefix_is_one_request_even_when_it_is_empty(azurite):
    container = azurite.new_container()
    fs = azurite.filesystem()
    counter = RequestCounter(fs, azurite.connection_string)
    publisher = AzureBlobPublisher(fs)
    for key in ("a/1.json", "a/2.json", "a/sub/x.json", "b/y.json"):
        publisher.replace(f"{container}/wf/{key}", b"{}")
    counter.reset()
    assert publisher.list_names(f"{container}/wf/a") == ["1.json", "2.json", "sub"]
    assert counter.total == 1
    counter.reset()
    assert publisher.list_names(f"{container}/wf/empty") == []
    assert counter.total == 1
    assert publisher.list_names(f"{container}/wf") == ["a", "b"]
    assert publisher.list_names(f"{container}/wf/a/1.json") == []  # a blob, not a folder


def test_a_run_and_an_idle_sweep_cost_what_readme_says(azurite):
    fs = azurite.filesystem()
    counter = RequestCounter(fs, azurite.connection_string)
    world = lw.virtual_world(fs, f"{azurite.new_container()}/wf")
    lw.run_workflow(steps, {"steps": 1}, world=world)  # warm: version record, connections
    counter.reset()
    assert lw.run_workflow(steps, {"steps": 0}, world=world).output == 0
    run, by_method = counter.total, dict(counter.by_method)
    worker = lw.Worker(world, workflows=[steps])
    try:
        counter.reset()
        assert worker.sweep() == 0
        first_sweep = counter.total
        counter.reset()
        assert worker.sweep() == 0
        next_sweep = counter.total
    finally:
        worker.close()
    print(f"\nAzure requests: a run {run} {by_method}, first idle sweep {first_sweep}, "
          f"next {next_sweep}")
    assert run == RUN_REQUESTS
    assert (first_sweep, next_sweep) == (2, 1)
