"""The README's workflow: `little run examples.quickstart:squares --input '{"n": 4}'`."""

import functools

import little_workflow as lw


def fetch(n: int) -> list[int]:
    return list(range(n))


async def square(x: int) -> int:
    return x * x


@lw.workflow(id="squares", input_schema={"type": "object", "required": ["n"],
                                         "properties": {"n": {"type": "integer"}}})
async def squares(ctx: lw.RunContext, input: dict) -> dict:
    numbers = await ctx.step("fetch", fetch, input["n"])
    squared = await ctx.parallel("square", [functools.partial(square, x) for x in numbers],
                                 max_concurrency=4)
    return {"sum": sum(squared)}


if __name__ == "__main__":
    result = lw.run_workflow(squares, {"n": 10})
    print(result.run_id, result.status, result.output)
