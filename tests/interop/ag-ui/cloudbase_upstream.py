"""A real CloudBase AG-UI server (cloudbase-agent-server 0.1.22) with a scripted agent and no LLM, for the
interop tests (tests/it/interop_ag_ui.rs). Listens on 127.0.0.1, port 0 unless given, and prints {"port": N}
as its first stdout line once it accepts connections.

    python cloudbase_upstream.py [PORT]        # POST http://127.0.0.1:PORT/send-message

The agent picks a scenario from the last user message ("scenario:NAME"): text, tool (a server-side call with
its result), client-tool (a call of the first tool the client offered, left for the client), thinking (pre-1.0 THINKING_* events, what this server emits for reasoning), state (a snapshot),
boom (raises inside the run: the server answers with two RUN_ERROR frames). A run whose last message is a
tool message reports that result; anything else is echoed back.
"""

import asyncio
import json
import socket
import sys

import uvicorn
from ag_ui.core import (
    EventType,
    RunFinishedEvent,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from cloudbase_agent.server import AgentServiceApp


def text_of(message):
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(getattr(part, "text", "") for part in content)
    return ""


def say(message_id, *deltas):
    yield TextMessageStartEvent(type=EventType.TEXT_MESSAGE_START, message_id=message_id, role="assistant")
    for delta in deltas:
        yield TextMessageContentEvent(type=EventType.TEXT_MESSAGE_CONTENT, message_id=message_id, delta=delta)
    yield TextMessageEndEvent(type=EventType.TEXT_MESSAGE_END, message_id=message_id)


class ScriptedAgent:
    async def run(self, inp):
        thread_id = inp.thread_id or "t"
        yield RunStartedEvent(type=EventType.RUN_STARTED, thread_id=thread_id, run_id=inp.run_id)
        messages = list(inp.messages)
        last = messages[-1] if messages else None
        if last is not None and last.role == "tool":
            name = "unknown"
            for message in messages:
                for call in getattr(message, "tool_calls", None) or []:
                    if call.id == last.tool_call_id:
                        name = call.function.name
            for event in say("m-result", f"Tool {name} returned: {text_of(last)}"):
                yield event
        else:
            said = next((text_of(m) for m in reversed(messages) if m.role == "user"), "")
            scenario = said[len("scenario:"):].strip() if said.startswith("scenario:") else None
            for event in self.scenario(scenario, said, inp):
                yield event
            if scenario == "boom":
                await asyncio.sleep(0)
                raise RuntimeError("boom requested")
        yield RunFinishedEvent(type=EventType.RUN_FINISHED, thread_id=thread_id, run_id=inp.run_id)

    def scenario(self, scenario, said, inp):
        if scenario == "text":
            yield from say("m1", "Hello ", "from ", "CloudBase.")
        elif scenario == "tool":
            yield from say("m1", "Let me check.")
            yield ToolCallStartEvent(
                type=EventType.TOOL_CALL_START, tool_call_id="call-w1", tool_call_name="get_weather"
            )
            yield ToolCallArgsEvent(type=EventType.TOOL_CALL_ARGS, tool_call_id="call-w1", delta='{"city":')
            yield ToolCallArgsEvent(type=EventType.TOOL_CALL_ARGS, tool_call_id="call-w1", delta='"Beijing"}')
            yield ToolCallEndEvent(type=EventType.TOOL_CALL_END, tool_call_id="call-w1")
            yield ToolCallResultEvent(
                type=EventType.TOOL_CALL_RESULT,
                message_id="tm1",
                tool_call_id="call-w1",
                content="sunny, 25C",
                role="tool",
            )
            yield from say("m2", "Beijing is sunny, 25C.")
        elif scenario == "client-tool":
            # A call of the first tool the client offered, left without a result: the client runs it.
            name = inp.tools[0].name if inp.tools else "confirmAction"
            yield ToolCallStartEvent(type=EventType.TOOL_CALL_START, tool_call_id="call-c1", tool_call_name=name)
            yield ToolCallArgsEvent(type=EventType.TOOL_CALL_ARGS, tool_call_id="call-c1", delta='{"action":"deploy"}')
            yield ToolCallEndEvent(type=EventType.TOOL_CALL_END, tool_call_id="call-c1")
        elif scenario == "thinking":
            yield ThinkingStartEvent(type=EventType.THINKING_START, title="plan")
            yield ThinkingTextMessageStartEvent(type=EventType.THINKING_TEXT_MESSAGE_START)
            yield ThinkingTextMessageContentEvent(
                type=EventType.THINKING_TEXT_MESSAGE_CONTENT, delta="Thinking it over."
            )
            yield ThinkingTextMessageEndEvent(type=EventType.THINKING_TEXT_MESSAGE_END)
            yield ThinkingEndEvent(type=EventType.THINKING_END)
            yield from say("m1", "Thought through.")
        elif scenario == "state":
            yield StateSnapshotEvent(type=EventType.STATE_SNAPSHOT, snapshot={"count": 1, "items": ["apple"]})
            yield from say("m1", "State sent.")
        elif scenario == "boom":
            yield from say("m1", "About to fail.")
        else:
            yield from say("m1", said or "nothing said")


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    app = AgentServiceApp().build(lambda: {"agent": ScriptedAgent()})
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))

    async def serve():
        # Print the port once uvicorn listens on the socket, so the test never connects too early.
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                return await task
            await asyncio.sleep(0.02)
        print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
