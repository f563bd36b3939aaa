"""Flask hello: one plain-text view at /."""
from flask import Flask, Response

app = Flask(__name__)


@app.route("/")
def hello():
    return Response(b"Hello, world!", mimetype="text/plain")
