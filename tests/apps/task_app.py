"""What asyncio and anyio see from inside a request served by the ASGI bridge: the current Task
(sniffio names the library "asyncio" exactly when asyncio.current_task() is not None), anyio's task
info, a Starlette BackgroundTask, a FastAPI dependency with yield whose teardown runs after the
response, a handler cancelled through an anyio cancel scope when the client goes away, and a
streaming response whose generator is closed then. Events are printed to stderr for the tests."""
import asyncio
import sys

import anyio
from fastapi import Depends, FastAPI, Request
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, StreamingResponse

app = FastAPI()
seen_tasks = []  # strong references: ids stay unique while the process lives


def event(*words):
    print("EVENT", *words, file=sys.stderr, flush=True)


@app.get("/task")
async def task_info():
    task = asyncio.current_task()
    seen_tasks.append(task)
    info = anyio.get_current_task()
    return {"is_task": isinstance(task, asyncio.Task), "done": task.done(), "task_id": id(task),
            "anyio_id": info.id, "same": info.id == id(task), "coro": type(task.get_coro()).__name__}


@app.get("/task-after-wait")
async def task_after_wait():
    before = asyncio.current_task()
    await asyncio.sleep(0.01)
    with anyio.fail_after(5):
        await anyio.sleep(0)
    return {"same": asyncio.current_task() is before and before is not None}


@app.get("/background")
async def background():
    return JSONResponse({"queued": True}, background=BackgroundTask(event, "BACKGROUND-RAN"))


async def resource():
    event("DEPENDENCY-OPEN")
    try:
        yield "resource"
    finally:
        await anyio.sleep(0)
        event("DEPENDENCY-CLOSED")


@app.get("/dependency")
async def dependency(res=Depends(resource)):
    return {"resource": res}


@app.get("/wait-for-disconnect")
async def wait_for_disconnect(request: Request):
    """Starlette's pre-2.4 way of noticing a client that left: a task waiting for http.disconnect
    cancels the task group's scope, and anyio cancels the request's Task where it waits."""
    async with anyio.create_task_group() as tg:

        async def watch():
            while (await request.receive())["type"] != "http.disconnect":
                pass
            event("DISCONNECT-SEEN")
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        task = asyncio.current_task()
        event("WAITING")
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            event("CANCELLED-ON-DISCONNECT", asyncio.current_task() is task)
            raise
    return {"cancelled": False}


@app.get("/stream-forever")
async def stream_forever():
    async def gen():
        try:
            i = 0
            while True:
                yield f"chunk {i}\n"
                i += 1
                await anyio.sleep(0.05)
        except BaseException as exc:  # closed once send() raised: the client left
            event("STREAM-ENDED", type(exc).__name__)
            raise

    return StreamingResponse(gen(), media_type="text/plain")
