"""A useChat-like AG-Kit send-message v0 client (Python stdlib only) for tests/it/interop_ag_kit.rs. The real
client, useChat of @cloudbase/agent-ui-web 0.0.24, cannot run outside a React bundle (specs/ag-kit.md §6); this
driver follows its source (§1-3): delta `messages`, tools with `parameters` as JSON text, `conversationId` on
every request, `Accept: text/event-stream`, the stream read until `data: [DONE]` (or EOF), client tools run
after the stream and, once every call of the round has a result, only the tool messages re-posted; an
interrupt answered with a `resume` whose payload is JSON text. It prints what it saw as one JSON line on stdout.

    python agkit_client.py URL SCENARIO

SCENARIO is a name from SCENARIOS below or a JSON list of steps, run in order in one conversation:

    {"say": "hi"}                                  a user message (and the automatic re-posts of client tools)
    {"resume": VALUE}                              answer the last interrupt received: payload JSON.stringify(VALUE)
    {"resume": VALUE, "interruptId": "int_x"}      answer that interrupt id instead ("@last": the last interrupt
                                                   received, even when it was answered already)
    {"conversation": "new"}                        from here on, a new conversation (a fresh conversationId)

The client offers one tool, `change-background-color` (as the seed's example), unless the step list starts with
{"tools": false}. Its handler answers "Background color successfully changed to: <color>" (or the arguments as
JSON when there is no color).

Output: {"client", "scenario", "conversationIds": [...], "steps": [STEP...], "violations": [...], "failure":
null | {"type", "message"}}. STEP = {"step": the step, "requests": [REQUEST...]}, one REQUEST per POST (the
first one and each automatic re-post): {"body": what was sent, "status": HTTP status, "headers":
{"content-type", "cache-control", "x-conversation-id"}, "errorBody": the body of a non-2xx answer (JSON if it
parses, else text), "events": the v0 events in order (without [DONE]), "done": whether [DONE] was seen,
"text": the concatenated `text` contents, "toolCalls": [{"id", "name", "argsText", "args": parsed or null}],
"toolResults": [{"toolCallId", "result"}], "interrupts": [the interrupt events], "errors": [the error frames],
"ranTools": [{"toolCallId", "name", "result"}] (client tools this request's round ran)}. "violations" lists
what useChat would choke on or mishandle: a frame that is not JSON or not one of the v0 event types (useChat
skips those silently; the proxy's `error` frame is allowed), `tool-call-args` when the last message is not the
assistant's (useChat throws), arguments that are not JSON at `tool-call-end`, a call for an unknown id,
`[DONE]` not seen on a 200 answer.

Exit code 0 when every step ran (refused requests are reported in their step), 1 when the client failed
(connection error, a resume with no interrupt to answer), 2 on a usage error or when the time limit
(CLIENT_TIMEOUT_S, default 20) ran out.
"""

import json
import os
import signal
import sys
import urllib.error
import urllib.request
import uuid

V0_TYPES = {"text", "tool-call-start", "tool-call-args", "tool-call-end", "tool-result", "interrupt", "error"}

TOOL = {
    "name": "change-background-color",
    "description": "Change the background color of the page",
    "parameters": json.dumps(
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
         "properties": {"color": {"type": "string"}}, "required": ["color"], "additionalProperties": False},
        separators=(",", ":")),
}

SCENARIOS = {
    # The scripted v0 agent (agkit_upstream.py).
    "text": [{"say": "hi"}],
    "client-tool": [{"say": "use the tool please"}],
    "server-tool": [{"say": "what is the weather in Beijing?"}],
    "interrupt": [{"say": "plan my garden"}, {"resume": {"selected": [0, 1]}}],
    "memory": [{"say": "my name is Ada"}, {"say": "what is my name?"},
               {"conversation": "new"}, {"say": "what is my name?"}],
    "fail": [{"say": "fail"}, {"say": "hi"}],
    "fail-after-text": [{"say": "fail after text"}],
    "stale-resume": [{"say": "hi"}, {"resume": {"selected": [0]}, "interruptId": "int_nobody_asked"},
                     {"say": "plan my garden"}, {"resume": {"selected": [1]}},
                     {"resume": {"selected": [1]}, "interruptId": "@last"}, {"say": "hi"}],
    # The built-in echo agent.
    "echo": [{"say": "hello echo"},
             {"say": "/tool change-background-color {\"color\":\"red\"}"},
             {"say": "/ask Which city?"}, {"resume": {"response": "Paris"}}],
    # The CloudBase AG-UI server (ag-ui/cloudbase_upstream.py).
    "cloudbase": [{"say": "scenario:text"}, {"say": "scenario:tool"}],
    "cloudbase-client-tool": [{"say": "scenario:client-tool"}],
    "cloudbase-boom": [{"say": "scenario:boom"}],
}


def stringify(value):
    """JSON.stringify: compact, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def run_tool(name, args):
    if name != TOOL["name"]:
        return f"Tool call failed with info: unknown tool {name}"
    if isinstance(args, dict) and isinstance(args.get("color"), str):
        return "Background color successfully changed to: " + args["color"]
    return stringify({"ok": True, "args": args})


class Chat:
    def __init__(self, url, timeout, tools):
        self.url = url
        self.timeout = timeout
        self.tools = [TOOL] if tools else []
        self.conversation_id = str(uuid.uuid4())
        self.conversation_ids = [self.conversation_id]
        # useChat's message list, as it builds it from the streams.
        self.messages = []
        self.interrupt = None
        self.last_interrupt_id = None
        self.violations = []

    def new_conversation(self):
        self.conversation_id = str(uuid.uuid4())
        self.conversation_ids.append(self.conversation_id)
        self.messages = []
        self.interrupt = None

    def body(self, fields):
        body = dict(fields)
        if self.tools:
            body["tools"] = self.tools
        body["conversationId"] = self.conversation_id
        return body

    def say(self, text):
        message = {"role": "user", "content": text}
        self.messages.append(message)
        return self.exchange(self.body({"messages": [message]}))

    def resume(self, value, interrupt_id=None):
        if interrupt_id == "@last":
            interrupt_id = self.last_interrupt_id
        if interrupt_id is None:
            if self.interrupt is None:
                raise RuntimeError("a resume step, but no interrupt to answer")
            interrupt_id = self.interrupt["id"]
        self.interrupt = None
        return self.exchange(self.body({"resume": {"interruptId": interrupt_id, "payload": stringify(value)}}))

    def exchange(self, body):
        """One request and, as useChat does, the automatic re-posts of the client tools' results."""
        requests = []
        while body is not None:
            seen = self.post(body)
            requests.append(seen)
            body = None
            round_calls = [c for c in seen["toolCalls"]
                           if c["id"] not in {r["toolCallId"] for r in seen["toolResults"]}]
            names = {tool["name"] for tool in self.tools}
            if seen["status"] == 200 and round_calls and all(c["name"] in names for c in round_calls):
                answers = []
                for call in round_calls:
                    result = run_tool(call["name"], call["args"])
                    seen["ranTools"].append({"toolCallId": call["id"], "name": call["name"], "result": result})
                    answers.append({"role": "tool", "content": result, "toolCallId": call["id"]})
                self.messages.extend(answers)
                body = self.body({"messages": answers})
        return requests

    def post(self, body):
        seen = {"body": body, "status": None, "headers": {}, "errorBody": None, "events": [], "done": False,
                "text": "", "toolCalls": [], "toolResults": [], "interrupts": [], "errors": [], "ranTools": []}
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        try:
            response = urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as error:
            seen["status"] = error.code
            seen["headers"] = {"content-type": error.headers.get("Content-Type")}
            raw = error.read().decode("utf-8", "replace")
            try:
                seen["errorBody"] = json.loads(raw)
            except ValueError:
                seen["errorBody"] = raw
            return seen
        with response:
            seen["status"] = response.status
            seen["headers"] = {name: response.headers.get(name)
                               for name in ("content-type", "cache-control", "x-conversation-id")}
            self.read_stream(response, seen)
        if not seen["done"]:
            self.violations.append("the stream ended without data: [DONE]")
        return seen

    def read_stream(self, response, seen):
        """eventsource-parser's framing: LF/CRLF line ends, comments ignored, one space after `data:` dropped."""
        data = []
        for raw in response:
            line = raw.decode("utf-8").rstrip("\r\n")
            if line.startswith(":"):
                continue
            if line.startswith("data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(" ") else value)
            elif line == "" and data:
                payload, data = "\n".join(data), []
                if payload.strip() == "[DONE]":
                    seen["done"] = True
                    return
                self.event(payload, seen)
        if data:
            payload = "\n".join(data)
            if payload.strip() == "[DONE]":
                seen["done"] = True
            else:
                self.event(payload, seen)

    def event(self, payload, seen):
        try:
            event = json.loads(payload.strip())
        except ValueError:
            self.violations.append(f"a frame that is not JSON: {payload!r}")
            return
        kind = event.get("type") if isinstance(event, dict) else None
        if kind not in V0_TYPES:
            self.violations.append(f"a frame that is no v0 event: {payload}")
            return
        seen["events"].append(event)
        last = self.messages[-1] if self.messages else None
        if kind == "text":
            seen["text"] += event.get("content", "")
            if last is not None and last["role"] == "assistant":
                last["content"] = last.get("content", "") + event.get("content", "")
            else:
                self.messages.append({"role": "assistant", "content": event.get("content", "")})
        elif kind == "tool-call-start":
            call = {"id": event.get("toolCallId"), "type": "function",
                    "function": {"name": event.get("toolCallName"), "arguments": ""}}
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": ""}
                self.messages.append(last)
            last.setdefault("toolCalls", []).append(call)
            seen["toolCalls"].append({"id": call["id"], "name": call["function"]["name"], "argsText": "",
                                      "args": None})
        elif kind == "tool-call-args":
            if last is None or last["role"] != "assistant":
                self.violations.append(f"tool-call-args when the last message is not the assistant's: {payload}")
                return
            call = self.call(seen, event.get("toolCallId"), payload)
            if call is not None:
                call["argsText"] += event.get("delta", "")
        elif kind == "tool-call-end":
            call = self.call(seen, event.get("toolCallId"), payload)
            if call is not None:
                try:
                    call["args"] = json.loads(call["argsText"] or "{}")
                except ValueError:
                    self.violations.append(f"arguments that are not JSON at tool-call-end: {call['argsText']!r}")
        elif kind == "tool-result":
            seen["toolResults"].append({"toolCallId": event.get("toolCallId"), "result": event.get("result")})
            self.messages.append({"role": "tool", "content": event.get("result"),
                                  "toolCallId": event.get("toolCallId")})
        elif kind == "interrupt":
            seen["interrupts"].append(event)
            self.interrupt = event
            self.last_interrupt_id = event.get("id")
        elif kind == "error":
            seen["errors"].append(event)

    def call(self, seen, call_id, payload):
        for call in seen["toolCalls"]:
            if call["id"] == call_id:
                return call
        self.violations.append(f"an event for a tool call that never started: {payload}")
        return None


def main():
    if len(sys.argv) != 3:
        print("usage: python agkit_client.py URL SCENARIO", file=sys.stderr)
        sys.exit(2)
    url, scenario = sys.argv[1], sys.argv[2]
    if scenario in SCENARIOS:
        steps = SCENARIOS[scenario]
    else:
        try:
            steps = json.loads(scenario)
        except ValueError:
            print(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}", file=sys.stderr)
            sys.exit(2)
    limit = float(os.environ.get("CLIENT_TIMEOUT_S", "20"))
    tools = True
    if steps and "tools" in steps[0]:
        tools = bool(steps[0]["tools"])
        steps = steps[1:]
    chat = Chat(url, limit, tools)
    report = {"client": "agkit_client.py (useChat-like)", "scenario": scenario, "conversationIds": [],
              "steps": [], "violations": chat.violations, "failure": None}

    def out_of_time(_signum, _frame):
        raise TimeoutError(f"the scenario took longer than {limit} s")

    signal.signal(signal.SIGALRM, out_of_time)
    signal.setitimer(signal.ITIMER_REAL, limit)
    code = 0
    try:
        for step in steps:
            entry = {"step": step, "requests": []}
            report["steps"].append(entry)
            if "say" in step:
                entry["requests"] = chat.say(step["say"])
            elif "resume" in step:
                entry["requests"] = chat.resume(step["resume"], step.get("interruptId"))
            elif step.get("conversation") == "new":
                chat.new_conversation()
            else:
                raise ValueError(f"unknown step {step!r}")
    except TimeoutError as error:
        report["failure"] = {"type": "TimeoutError", "message": str(error)}
        code = 2
    except Exception as error:  # noqa: BLE001 - every failure is reported, then exit 1
        report["failure"] = {"type": type(error).__name__, "message": str(error)}
        code = 1
    signal.setitimer(signal.ITIMER_REAL, 0)
    report["conversationIds"] = chat.conversation_ids
    print(json.dumps(report), flush=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
