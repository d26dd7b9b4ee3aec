"""A scripted CMDC gateway (Python standard library only) for the cmdc-as-ag-kit example: the seed REST + SSE
API of `cmdc_gateway` (specs/cmdc.md §1-3), no LLM. It listens on 127.0.0.1 (port 0 unless given) and prints
{"port": N} as its first stdout line once it accepts connections.

    python3 cmdc_gateway.py [PORT]

Every /v1 call needs the API key `sk-example` (X-API-Key or Authorization: Bearer). A prompt answers
"echo: <text>"; a prompt containing "danger" first pauses on approval_required (tool Shell) until
POST /v1/sessions/:id/approve or /reject {approvalId}: approved, it answers "Done: <text>"; rejected,
"Skipped: <text>". Events go to every GET /v1/sessions/:id/events subscriber; while none is attached they are
kept and replayed to the next one. Callback tools (POST /v1/sessions/:id/tools) are registered but never
called. Each request is logged on stderr.
"""

import json
import queue
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY = "sk-example"
LOCK = threading.Lock()
SESSIONS = {}


class Session:
    def __init__(self, sid, model):
        self.id, self.model = sid, model
        self.subscribers, self.backlog = [], []
        self.approval = None  # (approvalId, threading.Event, [decision])
        self.tools = {}  # callback tools the client registered (name -> callbackUrl); this script never calls them
        self.prompts = queue.Queue()
        threading.Thread(target=self.worker, daemon=True).start()

    def publish(self, event, data):
        with LOCK:
            if not self.subscribers:
                self.backlog.append((event, data))
            for q in self.subscribers:
                q.put((event, data))

    def subscribe(self):
        q = queue.Queue()
        with LOCK:
            for item in self.backlog:
                q.put(item)
            self.backlog.clear()
            self.subscribers.append(q)
        return q

    def unsubscribe(self, q):
        with LOCK:
            if q in self.subscribers:
                self.subscribers.remove(q)

    def worker(self):  # one run at a time
        while True:
            self.run(self.prompts.get())

    def run(self, text):
        self.publish("prompt_received", {"text": text})
        self.publish("agent_start", {})
        reply = "echo: " + text
        if "danger" in text.lower():
            approval_id = "apr_" + uuid.uuid4().hex[:8]
            decided, decision = threading.Event(), []
            with LOCK:
                self.approval = (approval_id, decided, decision)
            self.publish("approval_required", {"approvalId": approval_id, "toolName": "Shell",
                                               "args": {"command": "rm -rf ./scratch"}, "hint": "danger",
                                               "requestedAt": None})
            decided.wait()
            self.publish("approval_resolved", {"approvalId": approval_id, "status": decision[0]})
            reply = ("Done: " if decision[0] == "approved" else "Skipped: ") + text
        self.publish("message_start", {})
        words = reply.split(" ")
        for i, word in enumerate(words):
            self.publish("message_delta", {"delta": word if i == len(words) - 1 else word + " "})
        self.publish("agent_end", {"messageCount": 2, "lastMessage": {"content": reply, "role": "assistant"},
                                   "tokenUsage": {"promptTokens": 5, "completionTokens": 3, "totalTokens": 8}})


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        print(json.dumps({"request": f"{self.command} {self.path}"}), file=sys.stderr, flush=True)

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, code, message):
        self.reply(status, {"error": code, "message": message})

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return None

    def authed(self):
        return self.headers.get("X-API-Key") == KEY or self.headers.get("Authorization") == f"Bearer {KEY}"

    def route(self):
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[:2] != ["v1", "sessions"]:
            return None, None
        sid = parts[2] if len(parts) > 2 else None
        action = parts[3] if len(parts) > 3 else None
        return sid, action

    def session(self, sid):
        with LOCK:
            session = SESSIONS.get(sid)
        if session is None:
            self.error(404, "not_found", f"Session {sid} not found")
        return session

    def do_GET(self):
        if self.path == "/healthz":
            return self.reply(200, {"status": "ok", "version": "0.1.0"})
        if not self.authed():
            return self.error(401, "unauthorized", "Missing or invalid API key")
        sid, action = self.route()
        session = self.session(sid) if sid else None
        if session is None:
            return None if sid else self.error(404, "not_found", "No route matches")
        if action is None:
            return self.reply(200, {"sessionId": sid, "state": "idle"})
        if action != "events":
            return self.error(404, "not_found", "No route matches")
        # Subscribed before the headers go out: a client that acts as soon as it has them must not miss the
        # run's first events.
        q = session.subscribe()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            while True:
                event, data = q.get()
                self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                if event in ("agent_end", "agent_abort"):
                    return None
        except OSError:
            return None
        finally:
            session.unsubscribe(q)

    def do_POST(self):
        if not self.authed():
            return self.error(401, "unauthorized", "Missing or invalid API key")
        sid, action = self.route()
        body = self.body()
        if body is None:
            return self.error(400, "bad_request", "Invalid JSON")
        if sid is None:
            if "model" not in body:
                return self.error(422, "create_failed", ":missing_model")
            sid = body.get("sessionId") or uuid.uuid4().hex[:16]
            with LOCK:
                if sid not in SESSIONS:
                    SESSIONS[sid] = Session(sid, body["model"])
            return self.reply(201, {"sessionId": sid, "status": "created"})
        session = self.session(sid)
        if session is None:
            return None
        if action == "prompt":
            text = body.get("text") or body.get("prompt")
            if not text:
                return self.error(400, "bad_request", "Missing 'text' field")
            session.prompts.put(text)
            return self.reply(202, {"requestId": uuid.uuid4().hex, "sessionId": sid, "queued": False})
        if action in ("approve", "reject"):
            approval_id = body.get("approvalId")
            if not approval_id:
                return self.error(400, "bad_request", "Missing 'approvalId'")
            with LOCK:
                pending = session.approval
                if pending and pending[0] == approval_id and not pending[1].is_set():
                    pending[2].append("approved" if action == "approve" else "rejected")
                    pending[1].set()
                    session.approval = None
            return self.reply(200, {"ok": True, "action": action, "approvalId": approval_id})
        if action == "tools":
            if not body.get("name") or not body.get("callbackUrl"):
                return self.error(400, "bad_request", "Missing 'name' or 'callbackUrl'")
            with LOCK:
                session.tools[body["name"]] = body["callbackUrl"]
            return self.reply(201, {"ok": True, "sessionId": sid, "toolName": body["name"]})
        if action == "abort":
            return self.reply(202, {"ok": True})
        return self.error(404, "not_found", "No route matches")


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
