"""A scripted AG-Kit send-message v0 agent (Python stdlib only), the upstream of tests/it/interop_ag_kit.rs. No
runnable v0 server exists (specs/ag-kit.md §6); this one is the spec note's §6 script, extended. It listens on
127.0.0.1, port 0 unless given, and prints {"port": N} as its first stdout line once it accepts connections.

    python agkit_upstream.py [PORT]            # POST http://127.0.0.1:PORT/send-message (or /)

As a v0 server it keeps the history of every conversation under its `conversationId`; each request brings only
what is new (`messages`) or the answer to an interrupt (`resume`). What it answers, from the last new message
(user text is matched case-insensitively, first rule that applies):

    resume {interruptId, payload}   the conversation's pending interrupt: text "resumed with <payload>" (the
                                    payload as received: JSON text); another id: HTTP 400
    {role: "tool", content, ...}    text "tool said: <content>"
    "my name is NAME"               text "Nice to meet you, NAME."
    "what is my name"               text "Your name is NAME." from this conversation's history, or
                                    "I don't know your name yet."
    "fail after text"               text "Working on it." then an error frame
    "fail"                          an error frame {"type":"error","code":"AGENT_FAILED","message":"the agent
                                    failed on purpose"} (and nothing else)
    "plan"                          interrupt {id, reason "waiting_for_user_selection", payload {steps}}
    "weather"                       server tool get_weather {"city":"Beijing"}, its tool-result "sunny, 25C",
                                    then text "Sunny in Beijing."
    "tool"                          a call of the first tool the request offers, args {"color": "blue"} in two
                                    deltas, no tool-result (the client runs it and re-posts the result)
    "hi"                            text "Hello", " there!"
    anything else                   text "echo: <text>"

Frames are `data: <json>\\n\\n`, flushed one by one, then `data: [DONE]`; the body is chunked (HTTP/1.1,
keep-alive). Every request is logged on stderr as one JSON line {"request": {"path", "body"}}.
"""

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATHS = ("/", "/send-message")

LOCK = threading.Lock()
# conversationId -> {"history": [messages], "interrupt": pending interrupt id or None, "calls": n}
CONVERSATIONS = {}


def conversation(conversation_id):
    return CONVERSATIONS.setdefault(conversation_id, {"history": [], "interrupt": None, "calls": 0})


def text(content):
    return {"type": "text", "content": content}


def answer(body):
    """(events, error): the v0 events of one request, or (None, (status, message)) to refuse it."""
    with LOCK:
        conv = conversation(body.get("conversationId") or "")
        if "resume" in body:
            resume = body.get("resume") or {}
            if conv["interrupt"] is None or resume.get("interruptId") != conv["interrupt"]:
                return None, (400, f"no pending interrupt {resume.get('interruptId')!r}")
            conv["interrupt"] = None
            payload = resume.get("payload")
            payload = payload if isinstance(payload, str) else json.dumps(payload)
            events = [text("resumed with " + payload)]
        else:
            messages = body.get("messages") or []
            if not messages:
                return None, (400, "no messages")
            conv["history"].extend(messages)
            last = messages[-1]
            if last.get("role") == "tool":
                events = [text("tool said: " + str(last.get("content", "")))]
            else:
                events = for_user(conv, str(last.get("content", "")), body.get("tools") or [])
        for event in events:
            if event["type"] == "text":
                conv["history"].append({"role": "assistant", "content": event["content"]})
        return events, None


def for_user(conv, said, tools):
    lower = said.lower()
    name = re.search(r"my name is (\w+)", said, re.IGNORECASE)
    if name:
        return [text(f"Nice to meet you, {name.group(1)}.")]
    if "what is my name" in lower:
        for message in reversed(conv["history"][:-1]):
            if message.get("role") != "user":
                continue
            known = re.search(r"my name is (\w+)", str(message.get("content", "")), re.IGNORECASE)
            if known:
                return [text(f"Your name is {known.group(1)}.")]
        return [text("I don't know your name yet.")]
    failure = {"type": "error", "code": "AGENT_FAILED", "message": "the agent failed on purpose"}
    if "fail after text" in lower:
        return [text("Working on it."), failure]
    if "fail" in lower:
        return [failure]
    if "plan" in lower:
        conv["calls"] += 1
        interrupt_id = f"int_{conv['calls']}"
        conv["interrupt"] = interrupt_id
        return [{"type": "interrupt", "id": interrupt_id, "reason": "waiting_for_user_selection",
                 "payload": {"steps": [{"description": "Dig hole", "status": "enabled"},
                                       {"description": "Plant tree", "status": "enabled"}]}}]
    if "weather" in lower:
        conv["calls"] += 1
        call = f"s{conv['calls']}"
        return [{"type": "tool-call-start", "toolCallId": call, "toolCallName": "get_weather"},
                {"type": "tool-call-args", "toolCallId": call, "delta": "{\"city\":\"Beijing\"}"},
                {"type": "tool-call-end", "toolCallId": call},
                {"type": "tool-result", "toolCallId": call, "result": "sunny, 25C"},
                text("Sunny in Beijing.")]
    if "tool" in lower:
        if not tools:
            return [text("I have no tool to call.")]
        conv["calls"] += 1
        call = f"c{conv['calls']}"
        return [{"type": "tool-call-start", "toolCallId": call, "toolCallName": tools[0].get("name", "")},
                {"type": "tool-call-args", "toolCallId": call, "delta": "{\"color\":"},
                {"type": "tool-call-args", "toolCallId": call, "delta": " \"blue\"}"},
                {"type": "tool-call-end", "toolCallId": call}]
    if re.search(r"\bhi\b", lower):
        return [text("Hello"), text(" there!")]
    return [text("echo: " + said)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path not in PATHS:
            return self.refuse(404, f"no endpoint at {self.path}")
        try:
            body = json.loads(raw or b"{}")
        except ValueError as error:
            return self.refuse(400, f"invalid JSON: {error}")
        if not isinstance(body, dict):
            return self.refuse(400, "the body is not an object")
        print(json.dumps({"request": {"path": self.path, "body": body}}), file=sys.stderr, flush=True)
        events, error = answer(body)
        if error is not None:
            return self.refuse(*error)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            self.chunk(f"data: {json.dumps(event)}\n\n".encode())
            time.sleep(0.01)
        self.chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def chunk(self, data):
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def refuse(self, status, message):
        data = json.dumps({"error": {"code": "BAD_REQUEST" if status == 400 else "NOT_FOUND",
                                     "message": message}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
