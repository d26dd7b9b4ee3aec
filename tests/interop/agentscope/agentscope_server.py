"""A real AgentScope Runtime agent (agentscope-runtime 1.1.6.post2, its AgentApp with a scripted agent and no LLM)
for the interop tests (tests/it/interop_agentscope.rs). Runs in the AgentScope venv .ci/run makes
(tests/interop/agentscope/.venv). Listens on 127.0.0.1, port 0 unless given, and prints {"port": N} as its first
stdout line once it accepts connections (after the AgentApp's runner started). The Agent API is at POST /process.

    python agentscope_server.py [PORT]

What the agent does with the text of the last user message in `input` (the agentscope adapter hands it every
input message as an agentscope Msg; the handler yields (Msg, last) pairs, as an AgentScope ReActAgent does):
- anything else: answers "echo: <text>" as one assistant message streamed in two cumulative chunks;
- text containing "boom": raises ValueError("boom requested"); the runtime ends the run with a `failed`
  response, error {"code": "AGENT_UNKNOWN_ERROR", "message": "Unknown agent error: ValueError: boom requested"};
- text containing "tool": calls its own tool get_weather {"city": "Beijing"} (a `plugin_call` message), which
  returns "sunny" (a `plugin_call_output` message), then answers "echo: <text>";
- text containing "slow": as "anything else", but waits SLOW_S seconds (default 3) between the two chunks, so a
  test can send a second request for the same session while this run holds the runtime's session lock;
- "/turns": answers "turns: N", N = the number of user messages in `input` (the history the client sent).

Every POST is logged to stderr as it arrived, one JSON line: {"request": {"path", "session_id", "user_id",
"input": [{"type", "role", "text"}...] (text: the message's text contents joined), "tools": [names]}}.
"""

import asyncio
import json
import os
import socket
import sys

import uvicorn
from agentscope.message import Msg, TextBlock, ToolResultBlock, ToolUseBlock
from agentscope_runtime.engine.app import AgentApp

SLOW_S = float(os.environ.get("SLOW_S", "3"))


def log(value):
    print(json.dumps(value), file=sys.stderr, flush=True)


def logged(app):
    """The ASGI app, logging every POST body as the client sent it."""

    async def wrapper(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            request = json.loads(body)
            messages = []
            for m in request.get("input") or []:
                content = m.get("content")
                if isinstance(content, list):
                    text = "".join(c.get("text") or "" for c in content if isinstance(c, dict))
                else:
                    text = str(content)
                messages.append({"type": m.get("type"), "role": m.get("role"), "text": text})
            log({"request": {
                "path": scope["path"],
                "session_id": request.get("session_id"),
                "user_id": request.get("user_id"),
                "input": messages,
                "tools": [(t.get("function") or {}).get("name") for t in request.get("tools") or []],
            }})
        except (ValueError, AttributeError, TypeError):
            log({"request": {"path": scope["path"], "unparsed": body.decode("utf-8", "replace")}})
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await app(scope, replay, send)

    return wrapper


app = AgentApp(app_name="scripted", app_description="a scripted AgentScope agent without an LLM")


@app.query(framework="agentscope")
async def query_func(self, msgs, request=None, response=None, **kwargs):
    msgs = msgs if isinstance(msgs, list) else [msgs]
    text = ""
    users = 0
    for m in msgs:
        if getattr(m, "role", None) == "user":
            users += 1
            t = m.get_text_content() if hasattr(m, "get_text_content") else None
            if t:
                text = t
    if "boom" in text:
        raise ValueError("boom requested")
    if text.strip() == "/turns":
        yield Msg(name="scripted", role="assistant", content=[TextBlock(type="text", text=f"turns: {users}")]), True
        return
    if "tool" in text:
        call = ToolUseBlock(type="tool_use", id="call_1", name="get_weather", input={"city": "Beijing"})
        yield Msg(name="scripted", role="assistant", content=[call]), False
        yield Msg(name="scripted", role="assistant", content=[call]), True
        result = ToolResultBlock(
            type="tool_result", id="call_1", name="get_weather", output=[TextBlock(type="text", text="sunny")]
        )
        yield Msg(name="system", role="system", content=[result]), True
    # One message streamed as cumulative chunks (the same Msg id), as a streaming model does.
    acc, msg_id = "", None
    for i, piece in enumerate(["echo: ", text]):
        if i == 1 and "slow" in text:
            await asyncio.sleep(SLOW_S)
        acc += piece
        m = Msg(name="scripted", role="assistant", content=[TextBlock(type="text", text=acc)])
        msg_id = msg_id or m.id
        m.id = msg_id
        yield m, i == 1


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(logged(app), log_level="warning", lifespan="on"))

    async def serve():
        # Print the port once uvicorn listens (after the lifespan started the runner), so the test never
        # connects too early.
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                return await task
            await asyncio.sleep(0.02)
        print(json.dumps({"port": port}), flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
