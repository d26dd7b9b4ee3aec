"""A real A2A 0.2.5 agent (a2a-sdk 0.2.13, the spec's echo agent plus a few scenarios) for the interop tests
(tests/it/interop_a2a.rs). Listens on 127.0.0.1, port 0 unless given, and prints {"port": N} as its first
stdout line once it accepts connections. The card is at /.well-known/agent.json (the only path a2a-sdk 0.2.x
serves), the JSON-RPC endpoint at /.

    python a2a_server.py [PORT] [--no-streaming]     # --no-streaming: the card says capabilities.streaming=false

What the agent does with the user's text:
- anything else: streams "echo: " and the text as two chunks of one artifact, then completes (spec §6);
- "/ask QUESTION": pauses in input-required with QUESTION as the status message (final: true); the next
  message on that task (same taskId) completes it with "You answered: <text>". A message without the taskId
  starts a new task, so that reply only comes back when the client continued the paused task;
- "/fail": fails the task with the status message "the agent failed on purpose";
- "/raise": raises ServerError(UnsupportedOperationError "the agent refused the request"): a2a-sdk answers
  message/send with that JSON-RPC error (-32004) and message/stream with the Task, then an SSE event holding it;
- "/turns": answers "turn N of this context", N counting the messages this server saw in the contextId.

Every JSON-RPC request is logged to stderr as it arrived, one JSON line: {"rpc": {"method", "taskId": the
message's taskId or null, "contextId": the message's contextId or null, "text": its text parts joined}}; and
every run the agent starts as {"run": {"task", "context", "text", "resumed": whether it continued a paused
task}}.
"""

import asyncio
import json
import socket
import sys
from collections import Counter

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentSkill,
    Part,
    TaskState,
    TextPart,
    UnsupportedOperationError,
)
from a2a.utils import new_task
from a2a.utils.errors import ServerError

TURNS = Counter()


def log(value):
    print(json.dumps(value), file=sys.stderr, flush=True)


def logged(app):
    """The ASGI app, logging every JSON-RPC request body as the client sent it."""

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
            params = request.get("params") or {}
            message = params.get("message") or {}
            parts = message.get("parts") or []
            log({"rpc": {
                "method": request.get("method"),
                "taskId": message.get("taskId", params.get("id")),
                "contextId": message.get("contextId"),
                "text": "".join(p.get("text", "") for p in parts if isinstance(p, dict)),
            }})
        except (ValueError, AttributeError):
            log({"rpc": {"unparsed": body.decode("utf-8", "replace")}})
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await app(scope, replay, send)

    return wrapper


def text_parts(text):
    return [Part(root=TextPart(text=text))]


class Agent(AgentExecutor):
    async def execute(self, ctx: RequestContext, q: EventQueue) -> None:
        paused = ctx.current_task is not None and ctx.current_task.status.state == TaskState.input_required
        task = ctx.current_task or new_task(ctx.message)
        if ctx.current_task is None:
            await q.enqueue_event(task)
        text = ctx.get_user_input()
        TURNS[task.contextId] += 1
        log({"run": {"task": task.id, "context": task.contextId, "text": text, "resumed": paused}})
        up = TaskUpdater(q, task.id, task.contextId)
        await up.start_work()
        if paused:
            await self.say(up, "You answered: ", text)
            await up.complete()
        elif text.startswith("/ask"):
            question = text[len("/ask"):].strip() or "What next?"
            await up.requires_input(up.new_agent_message(text_parts(question)), final=True)
        elif text.strip() == "/raise":
            raise ServerError(error=UnsupportedOperationError(message="the agent refused the request"))
        elif text.strip() == "/fail":
            await up.failed(up.new_agent_message(text_parts("the agent failed on purpose")))
        elif text.strip() == "/turns":
            await self.say(up, "turn ", f"{TURNS[task.contextId]} of this context")
            await up.complete()
        else:
            await self.say(up, "echo: ", text)
            await up.complete()

    @staticmethod
    async def say(up, first, rest):
        # Two chunks of one artifact: the first replaces, the second appends and is the last.
        await up.add_artifact(text_parts(first), artifact_id="a1", name="response")
        await up.add_artifact(text_parts(rest), artifact_id="a1", append=True, last_chunk=True)

    async def cancel(self, ctx: RequestContext, q: EventQueue) -> None:
        await TaskUpdater(q, ctx.task_id, ctx.context_id).cancel()


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    streaming = "--no-streaming" not in sys.argv[1:]
    port = int(args[0]) if args else 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    card = AgentCard(
        name="Echo025",
        description="echo agent",
        url=f"http://127.0.0.1:{port}/",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=streaming),
        defaultInputModes=["text/plain"],
        defaultOutputModes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="echo", tags=["echo"])],
    )
    handler = DefaultRequestHandler(agent_executor=Agent(), task_store=InMemoryTaskStore())
    app = logged(A2AStarletteApplication(agent_card=card, http_handler=handler).build())
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))

    async def serve():
        # Print the port once uvicorn listens on the socket, so the test never connects too early.
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
