"""FastAPI hello: one plain-text route at /."""
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

app = FastAPI()


@app.get("/", response_class=PlainTextResponse)
async def hello():
    return "Hello, world!"
