"""A small real Flask app for the WSGI bridge tests."""
import hashlib
import os

from flask import Flask, Response, jsonify, request, send_file

app = Flask(__name__)


@app.get("/")
def index():
    return "hello from flask"


@app.get("/json")
def as_json():
    return jsonify(path=request.path, q=request.args.get("q"), root=request.root_path, url=request.url)


@app.post("/form")
def form():
    return jsonify({k: request.form.getlist(k) for k in request.form})


@app.post("/json")
def json_echo():
    return jsonify(echo=request.get_json(), len=request.content_length)


@app.post("/raw")
def raw():
    data = request.get_data()
    return jsonify(size=len(data), sha256=hashlib.sha256(data).hexdigest())


@app.get("/stream")
def stream():
    return Response((f"part{i}\n" for i in range(5)), mimetype="text/plain")


@app.get("/download")
def download():
    return send_file(os.environ.get("WSGI_TEST_FILE", __file__), mimetype="application/octet-stream")


@app.get("/slow")
def slow():
    import time

    time.sleep(int(request.args.get("ms", "200")) / 1000)
    return "slow from flask"
