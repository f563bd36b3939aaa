"""A FastAPI app with WebSocket routes for the WebSocket bridge tests: a JSON echo with a path
parameter and a query parameter, a route that closes with a policy violation, and an HTTP route
that reports the disconnect codes the WebSocket routes saw."""
from fastapi import FastAPI, WebSocket, WebSocketDisconnect, status

app = FastAPI()
closed = []


@app.get("/closed")
async def closed_codes():
    return {"closed": closed}


@app.websocket("/ws/{room}")
async def room(websocket: WebSocket, room: str, name: str = "anon"):
    await websocket.accept()
    await websocket.send_json({"room": room, "name": name})
    try:
        while True:
            data = await websocket.receive_json()
            await websocket.send_json({"room": room, "echo": data, "n": len(str(data))})
    except WebSocketDisconnect as e:
        closed.append(e.code)


@app.websocket("/bytes")
async def echo_bytes(websocket: WebSocket):
    await websocket.accept()
    async for data in websocket.iter_bytes():
        await websocket.send_bytes(data[::-1])


@app.websocket("/policy")
async def policy(websocket: WebSocket):
    await websocket.close(code=status.WS_1008_POLICY_VIOLATION)
