"""A FastAPI app for the ASGI bridge tests: validation (422), JSON bodies, dependencies,
background tasks and an exception handler."""
from fastapi import BackgroundTasks, Depends, FastAPI, HTTPException
from pydantic import BaseModel

app = FastAPI()
done = []


class Item(BaseModel):
    name: str
    price: float


def token(x_token: str | None = None):
    return x_token


@app.get("/")
async def root():
    return {"framework": "fastapi"}


@app.get("/items/{item_id}")
async def read_item(item_id: int, q: str | None = None):
    if item_id == 404:
        raise HTTPException(status_code=404, detail="no such item")
    return {"item_id": item_id, "q": q}


@app.post("/items")
async def create_item(item: Item, tok=Depends(token)):
    return {"name": item.name, "total": item.price * 2}


@app.post("/background")
async def background(tasks: BackgroundTasks):
    tasks.add_task(done.append, "ran")
    return {"queued": True}


@app.get("/background")
async def background_done():
    return {"done": done}


@app.get("/sync")
def sync_route():
    return {"threadpool": True}
