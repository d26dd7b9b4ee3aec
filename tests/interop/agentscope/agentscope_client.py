"""Drives an AgentScope Runtime Agent API endpoint (POST .../process) with the real shipped client,
agentscope-runtime 1.1.6.post2's HTTPAgentAPIClient, as an application would, and prints what the client saw
as one JSON line on stdout. Used by tests/it/interop_agentscope.rs; runs in the AgentScope venv .ci/run makes
(tests/interop/agentscope/.venv).

    python agentscope_client.py URL SPEC_JSON

SPEC_JSON:

    {"steps": [                                   // run in order
       {"text": "hello",                          // create_simple_text_request(text, session_id, user_id=...)
        "session_id": "s1", "user_id": "u1",      // optional
        "sync": true,                             // optional: HTTPAgentAPIClient.stream (requests) instead of
                                                  //   astream (httpx)
        "withHistory": true,                      // optional: `input` is the session's conversation so far (the
                                                  //   user messages sent and the completed assistant messages
                                                  //   seen in this run of the script), then the new message
        "answer": {"approve": true, "reason": "blue"},  // optional, instead of "text": answer the approval
                                                  //   requests (mcp_approval_request) of the session's last
                                                  //   step: input = the history, the requests as received,
                                                  //   one mcp_approval_response each
        "while": {...}}]}                         // optional: a second step (same keys) sent once this step's
                                                  //   first text content arrived, while this step's run still
                                                  //   streams (the runtime's one-run-per-session lock)

Output: {"client": "agentscope-runtime 1.1.6.post2", "steps": [STEP...], "warnings": [...], "error": null |
{"type", "message"}}. STEP = {"text", "session_id", "events": [every event the client yielded, as
{"class": its pydantic class, "event": model_dump(mode="json", exclude_none=True)}], "texts": [what
extract_text_from_event returned for each event, non-null only], "raw": [the JSON of every `data: ` line of the
same request sent again by hand: only for "while" steps, to show what the client drops], "while": STEP}.
"warnings" holds what the client logged at warning level or above (it logs an event its models reject, then
drops it).

Exit code 0 when every step ran, 1 when the client raised (HTTP error, connection error), 2 on a usage error or
when the time limit (CLIENT_TIMEOUT_S, default 20) ran out.
"""

import asyncio
import json
import logging
import os
import sys
from importlib.metadata import version

import httpx
from agentscope_runtime.engine.helpers.agent_api_client import (
    HTTPAgentAPIClient,
    create_simple_text_request,
    extract_text_from_event,
)
from agentscope_runtime.engine.schemas.agent_schemas import AgentRequest, DataContent, Message

# session_id -> the messages of the conversation so far (sent and received), as the client's models.
TRANSCRIPTS = {}
# session_id -> the completed mcp_approval_request messages of the session's last step.
APPROVALS = {}

WARNINGS = []


class Collect(logging.Handler):
    def emit(self, record):
        WARNINGS.append(f"{record.name}: {record.getMessage()}")


def dump_event(event):
    return {"class": type(event).__name__, "event": event.model_dump(mode="json", exclude_none=True)}


def request_for(step):
    kwargs = {}
    if step.get("user_id"):
        kwargs["user_id"] = step["user_id"]
    session = step.get("session_id")
    if "answer" in step:
        answer = step["answer"]
        history = list(TRANSCRIPTS.get(session, []))
        for approval in APPROVALS.get(session, []):
            history.append(approval)
            request_id = approval.content[0].data["id"]
            history.append(Message(
                type="mcp_approval_response",
                role="user",
                content=[DataContent(type="data", data={"approval_request_id": request_id, **answer})],
            ))
        return AgentRequest(input=history, stream=True, session_id=session, **kwargs)
    request = create_simple_text_request(step["text"], session_id=session, **kwargs)
    if step.get("withHistory"):
        request.input = list(TRANSCRIPTS.get(session, [])) + request.input
    return request


def record(entry, event):
    entry["events"].append(dump_event(event))
    if isinstance(event, Message) and event.status == "completed":
        if event.type == "message" and event.role == "assistant":
            TRANSCRIPTS.setdefault(entry["session_id"], []).append(event)
        elif event.type == "mcp_approval_request":
            APPROVALS.setdefault(entry["session_id"], []).append(event)
    text = extract_text_from_event(event)
    if text is not None:
        entry["texts"].append(text)


async def raw_frames(url, request):
    """The same request, posted by hand: every `data: ` payload, parsed, including what the client drops."""
    frames = []
    payload = request.model_dump(exclude_none=True)
    async with httpx.AsyncClient(timeout=15) as http:
        async with http.stream("POST", url, json=payload, headers={"Accept": "text/event-stream"}) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    try:
                        frames.append(json.loads(line[6:]))
                    except ValueError:
                        frames.append({"unparsed": line[6:]})
    return frames


async def run_step(client, url, step):
    session = step.get("session_id")
    entry = {"text": step.get("text"), "session_id": session, "events": [], "texts": []}
    request = request_for(step)
    entry["input"] = [m.model_dump(mode="json", exclude_none=True) for m in request.input]
    known = TRANSCRIPTS.setdefault(session, [])
    known.extend([m for m in request.input if m.type == "message" and not any(m is k for k in known)])
    APPROVALS[session] = []
    if step.get("sync"):
        # requests, in a thread so a "while" step could still run (sync steps take no "while").
        def consume():
            for event in client.stream(request):
                record(entry, event)

        await asyncio.to_thread(consume)
        return entry
    second = step.get("while")
    started = asyncio.Event()
    side = None

    async def side_step():
        await started.wait()
        inner = await run_step(client, url, second)
        inner["raw"] = await raw_frames(url, request_for(second))
        return inner

    if second:
        side = asyncio.create_task(side_step())
    async for event in client.astream(request):
        record(entry, event)
        if side is not None and not started.is_set() and getattr(event, "object", None) == "content" \
                and getattr(event, "type", None) == "text":
            started.set()
            # Let the second request run to its end while this run is held open.
            entry["while"] = await side
    if side is not None and "while" not in entry:
        side.cancel()
        entry["while"] = None
    return entry


async def run(url, spec, report):
    client = HTTPAgentAPIClient(url, timeout=15)
    for step in spec.get("steps", []):
        report["steps"].append(await run_step(client, url, step))


async def main():
    if len(sys.argv) < 2:
        print("usage: python agentscope_client.py URL [SPEC_JSON]", file=sys.stderr)
        sys.exit(2)
    url = sys.argv[1]
    spec = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {"steps": [{"text": "hi"}]}
    handler = Collect(level=logging.WARNING)
    logging.getLogger().addHandler(handler)
    logging.getLogger("agentscope_runtime").addHandler(handler)
    report = {
        "client": f"agentscope-runtime {version('agentscope-runtime')}",
        "steps": [],
        "warnings": WARNINGS,
        "error": None,
    }
    limit = float(os.environ.get("CLIENT_TIMEOUT_S", "20"))
    code = 0
    try:
        await asyncio.wait_for(run(url, spec, report), limit)
    except asyncio.TimeoutError:
        report["timeout"] = limit
        code = 2
    except Exception as error:  # noqa: BLE001 - every client failure is reported, then exit 1
        report["error"] = {"type": type(error).__name__, "message": str(error)}
        code = 1
    print(json.dumps(report), flush=True)
    sys.exit(code)


if __name__ == "__main__":
    asyncio.run(main())
