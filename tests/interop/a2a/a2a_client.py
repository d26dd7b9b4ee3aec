"""Drives an A2A agent with the real a2a-sdk 0.2.13 A2AClient, as an A2A application would, and prints what the
client saw as one JSON line on stdout. Used by tests/it/interop_a2a.rs; runs in the venv .ci/run makes
(tests/interop/.venv).

    python a2a_client.py BASE_URL SPEC_JSON

The client is built from the agent card: A2AClient.get_client_from_agent_card_url(BASE_URL, cardPath) fetches
<BASE_URL>/<cardPath> and sends every request to the card's `url`. SPEC_JSON:

    {"cardPath": "/.well-known/agent.json",       // default: the SDK's own (agent.json)
     "steps": [                                   // run in order
       {"op": "send" | "stream" | "get" | "cancel",   // message/send, message/stream, tasks/get, tasks/cancel
        "name": "a",                              // optional: later steps can refer to this step's task
        "text": "hello",                          // send, stream: the user message's one text part
        "data": {"approved": true},               // send, stream: one data part instead of the text
        "task": "a",                              // send, stream: continue step a's task (its taskId and
                                                  //   contextId); get, cancel: that task
        "context": "a",                           // send, stream: only step a's contextId (a new task in it)
        "taskId": "t-1",                          // a literal taskId instead of a step's (unknown tasks)
        "historyLength": 5}]}                     // get (optional)

Output: {"sdk": "a2a-sdk 0.2.13", "card": the card as the SDK parsed it, "steps": [STEP...], "sdkError": null |
{"type", "message"}}. STEP = {"op", "name", "message": the message sent (send, stream), "result": the
JSON-RPC result as the SDK parsed it (send, get, cancel) or null, "error": the JSON-RPC error object or null,
"events": [every stream event's result, as parsed] (stream)}. Everything is the SDK's pydantic models dumped
as JSON (mode="json", exclude_none).

Exit code 0 when every step ran (JSON-RPC errors are reported in their step, not raised), 1 when the SDK
raised (HTTP error, invalid JSON, a response its models reject: the report's sdkError says which), 2 on a
usage error or when the time limit (CLIENT_TIMEOUT_S, default 20) ran out.
"""

import asyncio
import json
import os
import sys
from importlib.metadata import version
from uuid import uuid4

import httpx
from a2a.client import A2AClient
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    JSONRPCErrorResponse,
    Message,
    MessageSendParams,
    Part,
    Role,
    SendMessageRequest,
    SendStreamingMessageRequest,
    TaskIdParams,
    TaskQueryParams,
    DataPart,
    TextPart,
)


def part_of(step):
    """The message's one part: the step's data part, else its text."""
    if "data" in step:
        return Part(root=DataPart(data=step["data"]))
    return Part(root=TextPart(text=step["text"]))


def dump(model):
    return model.model_dump(mode="json", exclude_none=True) if model is not None else None


def ids_of(result):
    """(taskId, contextId) of a Task, Message or streaming event."""
    if result is None:
        return None, None
    kind = getattr(result, "kind", None)
    if kind == "task":
        return result.id, result.contextId
    return getattr(result, "taskId", None), getattr(result, "contextId", None)


async def run(base, spec, report):
    async with httpx.AsyncClient(timeout=15) as http:
        kwargs = {}
        if spec.get("cardPath"):
            kwargs["agent_card_path"] = spec["cardPath"]
        client = await A2AClient.get_client_from_agent_card_url(http, base, **kwargs)
        report["card"] = dump(client.agent_card)
        known = {}  # step name -> (taskId, contextId)
        for step in spec.get("steps", []):
            op = step["op"]
            entry = {"op": op, "name": step.get("name"), "result": None, "error": None}
            report["steps"].append(entry)
            task_id, context_id = known.get(step.get("task"), (None, None))
            if step.get("context"):
                context_id = known[step["context"]][1]
            task_id = step.get("taskId", task_id)
            if op in ("send", "stream"):
                message = Message(
                    role=Role.user,
                    messageId=str(uuid4()),
                    parts=[part_of(step)],
                    taskId=task_id,
                    contextId=context_id,
                )
                entry["message"] = dump(message)
                params = MessageSendParams(message=message)
                ids = (None, None)
                if op == "send":
                    response = await client.send_message(SendMessageRequest(id=str(uuid4()), params=params))
                    root = response.root
                    if isinstance(root, JSONRPCErrorResponse):
                        entry["error"] = dump(root.error)
                    else:
                        entry["result"] = dump(root.result)
                        ids = ids_of(root.result)
                else:
                    entry["events"] = []
                    request = SendStreamingMessageRequest(id=str(uuid4()), params=params)
                    async for event in client.send_message_streaming(request):
                        root = event.root
                        if isinstance(root, JSONRPCErrorResponse):
                            entry["error"] = dump(root.error)
                            continue
                        entry["events"].append(dump(root.result))
                        if ids[0] is None:
                            ids = ids_of(root.result)
                if step.get("name") and entry["error"] is None:
                    known[step["name"]] = ids
            elif op == "get":
                params = TaskQueryParams(id=task_id, historyLength=step.get("historyLength"))
                response = await client.get_task(GetTaskRequest(id=str(uuid4()), params=params))
                root = response.root
                if isinstance(root, JSONRPCErrorResponse):
                    entry["error"] = dump(root.error)
                else:
                    entry["result"] = dump(root.result)
            elif op == "cancel":
                response = await client.cancel_task(CancelTaskRequest(id=str(uuid4()), params=TaskIdParams(id=task_id)))
                root = response.root
                if isinstance(root, JSONRPCErrorResponse):
                    entry["error"] = dump(root.error)
                else:
                    entry["result"] = dump(root.result)
            else:
                raise ValueError(f"unknown op {op!r}")


async def main():
    if len(sys.argv) < 2:
        print("usage: python a2a_client.py BASE_URL [SPEC_JSON]", file=sys.stderr)
        sys.exit(2)
    base = sys.argv[1]
    spec = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {"steps": [{"op": "send", "text": "hi"}]}
    report = {"sdk": f"a2a-sdk {version('a2a-sdk')}", "card": None, "steps": [], "sdkError": None}
    limit = float(os.environ.get("CLIENT_TIMEOUT_S", "20"))
    code = 0
    try:
        await asyncio.wait_for(run(base, spec, report), limit)
    except asyncio.TimeoutError:
        report["timeout"] = limit
        code = 2
    except Exception as error:  # noqa: BLE001 - every SDK failure is reported, then exit 1
        report["sdkError"] = {"type": type(error).__name__, "message": str(error)}
        code = 1
    print(json.dumps(report), flush=True)
    sys.exit(code)


if __name__ == "__main__":
    asyncio.run(main())
