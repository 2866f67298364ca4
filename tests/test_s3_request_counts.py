"""What a run and an idle sweep cost on S3, request by request (counted against a real
moto server): README's object-store table quotes these figures. Each request is there
for a guarantee (the lock, the active index, the catalogue's write protocol, the log);
reading a key or listing a prefix is one request, not the two s3fs's `cat_file`
(HEAD for the size, then GET; a missing key: HEAD, then a LIST to look for a folder)
and `ls` (an empty prefix: the parent listed too, to look for a file) would send."""

from __future__ import annotations

from s3_server import RequestCounter

import little_workflow as lw
from fs_adapters.object_store import ObjectStorePublisher

#: A zero-step run on a warm World: lock 1, the run's log and its gc mark looked for 2,
#: active index 1 (the workflow's version record: looked for by the World's first run
#: only), catalogue 4 entries + 1 document read + 1 document, `run.created` 1; `started` and `completed`: 6 catalogue requests and 1 event each,
#: plus 1 listing of the log after each of the three events (W6); active index removed
#: 1, lock released 1.
RUN_REQUESTS = 32


@lw.workflow(id="req-steps")
async def steps(ctx: lw.RunContext, input: dict) -> int:
    total = 0
    for i in range(input["steps"]):
        total += await ctx.step(f"s{i}", lambda i=i: i)
    return total


def test_reading_a_key_is_one_get_whether_or_not_it_is_there(moto_s3):
    bucket = moto_s3.new_bucket()
    fs = moto_s3.filesystem()
    counter = RequestCounter(fs)
    publisher = ObjectStorePublisher(fs)
    publisher.replace(f"{bucket}/wf/doc.json", b"{}")
    counter.reset()
    assert publisher.read(f"{bucket}/wf/doc.json") == b"{}"
    assert counter.by_method == {"GET": 1}
    counter.reset()
    assert publisher.read(f"{bucket}/wf/missing.json") is None
    assert counter.by_method == {"GET": 1}
    counter.reset()
    assert publisher.read(f"{bucket}/wf") is None  # a prefix, not a key
    assert counter.by_method == {"GET": 1}


def test_listing_a_prefix_is_one_request_even_when_it_is_empty(moto_s3):
    bucket = moto_s3.new_bucket()
    fs = moto_s3.filesystem()
    counter = RequestCounter(fs)
    publisher = ObjectStorePublisher(fs)
    for key in ("a/1.json", "a/2.json", "a/sub/x.json", "b/y.json"):
        publisher.replace(f"{bucket}/wf/{key}", b"{}")
    counter.reset()
    assert publisher.list_names(f"{bucket}/wf/a") == ["1.json", "2.json", "sub"]
    assert counter.total == 1
    counter.reset()
    assert publisher.list_names(f"{bucket}/wf/empty") == []
    assert counter.total == 1
    assert publisher.list_names(f"{bucket}/wf") == ["a", "b"]
    assert publisher.list_names(f"{bucket}/wf/a/1.json") == []  # a key, not a folder


def test_listing_pages_past_a_thousand_names(moto_s3):
    from s3_server import put_objects_directly

    bucket = moto_s3.new_bucket()
    put_objects_directly(bucket, {f"wf/many/{i:05d}": b"" for i in range(1005)})
    fs = moto_s3.filesystem()
    counter = RequestCounter(fs)
    names = ObjectStorePublisher(fs).list_names(f"{bucket}/wf/many")
    assert names == [f"{i:05d}" for i in range(1005)]
    assert counter.total == 2


def test_a_run_and_an_idle_sweep_cost_what_readme_says(moto_s3):
    fs = moto_s3.filesystem()
    counter = RequestCounter(fs)
    world = lw.virtual_world(fs, f"{moto_s3.new_bucket()}/wf")
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
    print(f"\nS3 requests: a run {run} {by_method}, first idle sweep {first_sweep}, "
          f"next {next_sweep}")
    assert run == RUN_REQUESTS
    # The active index listed; the first sweep (then one every schedules.REFRESH_SECONDS)
    # also lists the schedules.
    assert (first_sweep, next_sweep) == (2, 1)
