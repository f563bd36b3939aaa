"""A Flask app behind mutual TLS (tests/ops/test_tls_operator.py): / greets the client certificate's
subject from SSL_CLIENT_S_DN, /ssl answers every SSL_* variable of the environ as JSON."""
from flask import Flask, jsonify, request

app = Flask(__name__)


@app.get("/")
def hello():
    return f"hello {request.environ.get('SSL_CLIENT_S_DN', '(no client certificate)')}"


@app.get("/ssl")
def ssl_vars():
    return jsonify({k: v for k, v in request.environ.items() if k.startswith("SSL_") or k == "HTTPS"})
