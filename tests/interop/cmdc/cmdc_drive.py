"""Drives the proxy's CMDC inbound (a CMDC gateway) with the real cmdc-sdk 0.1.0, sync and async, over SSE and
the WebSocket, with auto-approve. Prints one JSON report as its last stdout line.

    python cmdc_drive.py BASE_URL API_KEY

The gateway behind BASE_URL routes to an upstream that asks for approval when the prompt contains "danger",
asks a question through the `ask_user` tool it is offered when the prompt asks "which colour?", and otherwise
answers "echo: TEXT" (tests/it/interop_cmdc.rs).
"""

import asyncio
import json
import sys

from cmdc import CMDC, AuthError


def main():
    base, key = sys.argv[1], sys.argv[2]
    report = {}
    client = CMDC(base_url=base, api_key=key)
    health = client.health()
    report["health"] = {"status": health.status, "version": health.version}
    with client.session(model="deepseek:deepseek-chat", system_prompt="be brief", max_turns=5) as s:
        report["sse_events"] = [e.type for e in s.prompt("hello")]
        report["sync_text"] = s.prompt_sync("again")
        report["hitl_events"] = [e.type for e in s.prompt("danger op", approval_policy="auto_approve")]
        info = s.get_info()
        report["info"] = {"state": info.state, "turns": info.turns}
        stats = s.get_stats()
        report["stats"] = {"prompt_count": stats.prompt_count, "turns": stats.turns}
        report["messages"] = [m.role for m in s.get_messages()]
        ask_events, asked, answer = [], [], []
        for e in s.prompt("which colour?"):
            ask_events.append(e.type)
            if e.type == "ask_user":
                asked.append(e.question)
                s.respond(e.ask_ref, "blue")
            if e.type == "message_delta":
                answer.append(e.delta)
        report["ask_events"], report["asked"], report["ask_answer"] = ask_events, asked, "".join(answer)
        with s.connect_ws() as ws:
            report["ws_ack"] = ws.send_prompt("danger ws")
            ws_events = []
            for e in ws.iter_events():
                ws_events.append(e.type)
                if e.type == "approval_required":
                    report["ws_approve_ack"] = ws.approve(e.approval_id)
            report["ws_events"] = ws_events
    try:
        CMDC(base_url=base, api_key="sk-bad").create_session(model="m")
        report["bad_key"] = "accepted"
    except AuthError as e:
        report["bad_key"] = e.status_code
    report["async"] = asyncio.run(drive_async(base, key))
    print(json.dumps(report))


async def drive_async(base, key):
    out = {}
    client = CMDC(base_url=base, api_key=key)
    async with client.asession(model="deepseek:deepseek-chat") as s:
        out["sse_events"] = [e.type async for e in await s.aprompt("hi async")]
        out["hitl_events"] = [e.type async for e in await s.aprompt("danger async", approval_policy="auto_approve")]
        async with s.connect_ws() as ws:
            out["ws_ack"] = await ws.send_prompt("ws async")
            out["ws_events"] = [e.type async for e in ws.iter_events()]
    await client.aclose()
    return out


if __name__ == "__main__":
    main()
