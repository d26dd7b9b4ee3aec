// A scripted AG-UI agent for the interop tests: writes SSE frames by hand, so each scenario controls the
// exact wire. Listens on 127.0.0.1, port 0 unless given, and prints {"port": N} as its first stdout line.
//
//   node upstream.mjs [PORT]
//
// POST any path with a RunAgentInput. The scenario is the last user message's text ("scenario:NAME"); a run
// whose last message is a tool message answers "Tool <name> returned: <content>" (the client-tool round
// trip). Every request body is logged to stderr as one JSON line ("request: {...}").
//
// Scenarios: text, tool (server-side call with its result), client-tool (a call of the first tool the
// client offered, left for the client), reasoning (1.0 REASONING_*), thinking (pre-1.0 THINKING_*), state
// (snapshot + JSON Patch delta), chunks (TEXT_MESSAGE_CHUNK / TOOL_CALL_CHUNK), quirks (CRLF line ends,
// comments, event:/id: lines, `data:` without a space, nulls for absent fields), eof (no terminal event),
// interrupt (RUN_FINISHED.outcome.interrupt; the run that carries `resume` reports the answers),
// double-error (two RUN_ERROR frames, as cloudbase-agent-server 0.1.22 sends), http-500 (refuses the run).
// Anything else is echoed back as text.

import http from "node:http";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function textOf(message) {
  if (typeof message?.content === "string") return message.content;
  if (Array.isArray(message?.content)) {
    return message.content
      .filter((part) => part.type === "text")
      .map((part) => part.text)
      .join("");
  }
  return "";
}

function text(id, ...deltas) {
  return [
    { type: "TEXT_MESSAGE_START", messageId: id, role: "assistant" },
    ...deltas.map((delta) => ({ type: "TEXT_MESSAGE_CONTENT", messageId: id, delta })),
    { type: "TEXT_MESSAGE_END", messageId: id },
  ];
}

/// The frames of one run: [string] raw frames or event objects (written as `data: JSON\n\n`).
function script(input) {
  const { threadId, runId } = input;
  const started = { type: "RUN_STARTED", threadId, runId };
  const finished = { type: "RUN_FINISHED", threadId, runId };
  const messages = input.messages ?? [];
  const last = messages[messages.length - 1];

  if (input.resume?.length) {
    const answers = input.resume.map((r) => `${r.interruptId}=${r.status}:${JSON.stringify(r.payload ?? null)}`);
    return [started, ...text("m-resumed", `Resumed with ${answers.join(", ")}`), finished];
  }

  if (last?.role === "tool") {
    const call = messages
      .flatMap((m) => (m.role === "assistant" ? m.toolCalls ?? [] : []))
      .find((c) => c.id === last.toolCallId);
    const name = call?.function?.name ?? "unknown";
    return [started, ...text("m-result", `Tool ${name} returned: ${textOf(last)}`), finished];
  }

  const said = textOf([...messages].reverse().find((m) => m.role === "user"));
  const scenario = said.startsWith("scenario:") ? said.slice("scenario:".length).trim() : null;
  switch (scenario) {
    case "text":
      return [started, ...text("m1", "Hello ", "from ", "upstream."), finished];
    case "tool":
      return [
        started,
        ...text("m1", "Let me check."),
        { type: "TOOL_CALL_START", toolCallId: "call-w1", toolCallName: "get_weather", parentMessageId: "m1" },
        { type: "TOOL_CALL_ARGS", toolCallId: "call-w1", delta: '{"city":' },
        { type: "TOOL_CALL_ARGS", toolCallId: "call-w1", delta: '"Beijing"}' },
        { type: "TOOL_CALL_END", toolCallId: "call-w1" },
        { type: "TOOL_CALL_RESULT", messageId: "tm1", toolCallId: "call-w1", content: "sunny, 25C" },
        ...text("m2", "Beijing is sunny, 25C."),
        finished,
      ];
    case "client-tool": {
      const tool = input.tools?.[0]?.name ?? "confirmAction";
      return [
        started,
        { type: "TOOL_CALL_START", toolCallId: "call-c1", toolCallName: tool },
        { type: "TOOL_CALL_ARGS", toolCallId: "call-c1", delta: '{"action":"deploy"}' },
        { type: "TOOL_CALL_END", toolCallId: "call-c1" },
        finished,
      ];
    }
    case "reasoning":
      return [
        started,
        { type: "REASONING_START", messageId: "r1" },
        { type: "REASONING_MESSAGE_START", messageId: "r1m", role: "reasoning" },
        { type: "REASONING_MESSAGE_CONTENT", messageId: "r1m", delta: "The user wants " },
        { type: "REASONING_MESSAGE_CONTENT", messageId: "r1m", delta: "a short answer." },
        { type: "REASONING_MESSAGE_END", messageId: "r1m" },
        { type: "REASONING_END", messageId: "r1" },
        ...text("m1", "Short answer."),
        finished,
      ];
    case "thinking":
      return [
        started,
        { type: "THINKING_START", title: "plan" },
        { type: "THINKING_TEXT_MESSAGE_START" },
        { type: "THINKING_TEXT_MESSAGE_CONTENT", delta: "Thinking it over." },
        { type: "THINKING_TEXT_MESSAGE_END" },
        { type: "THINKING_END" },
        ...text("m1", "Thought through."),
        finished,
      ];
    case "state":
      return [
        started,
        { type: "STATE_SNAPSHOT", snapshot: { count: 0, items: [] } },
        {
          type: "STATE_DELTA",
          delta: [
            { op: "replace", path: "/count", value: 1 },
            { op: "add", path: "/items/-", value: "apple" },
          ],
        },
        ...text("m1", "State updated."),
        finished,
      ];
    case "chunks":
      return [
        started,
        { type: "TEXT_MESSAGE_CHUNK", messageId: "m1", role: "assistant", delta: "Chunked " },
        { type: "TEXT_MESSAGE_CHUNK", delta: "text." },
        { type: "TOOL_CALL_CHUNK", toolCallId: "call-k1", toolCallName: "lookup", delta: '{"q":' },
        { type: "TOOL_CALL_CHUNK", delta: '"x"}' },
        { type: "TOOL_CALL_RESULT", messageId: "tk1", toolCallId: "call-k1", content: "found" },
        finished,
      ];
    case "quirks":
      return [
        `event: message\r\nid: 1\r\ndata: ${JSON.stringify(started)}\r\n\r\n`,
        ": keep-alive\r\n\r\n",
        `data:${JSON.stringify({ type: "TEXT_MESSAGE_START", messageId: "m1", role: null, rawEvent: null })}\n\n`,
        `data: ${JSON.stringify({ type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "Quirky " })}\r\r`,
        `data: ${JSON.stringify({ type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "but fine." })}\n\n`,
        `data: ${JSON.stringify({ type: "TEXT_MESSAGE_END", messageId: "m1" })}\n\n`,
        `data: ${JSON.stringify({ ...finished, outcome: null, result: null })}\r\n\r\n`,
      ];
    case "interrupt":
      return [
        started,
        ...text("m1", "Delete 15 temp files?"),
        {
          ...finished,
          outcome: {
            type: "interrupt",
            interrupts: [
              {
                id: "int-1",
                reason: "approval",
                message: "Delete 15 temp files?",
                responseSchema: { type: "object", properties: { approved: { type: "boolean" } } },
              },
            ],
          },
        },
      ];
    case "eof":
      return [started, { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
        { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "Cut off" }];
    case "double-error":
      return [
        started,
        { type: "RUN_ERROR", message: "boom requested", run_id: runId, thread_id: threadId },
        { type: "RUN_ERROR", message: "Failed to process agent request: boom requested", code: "INTERNAL_ERROR" },
      ];
    default:
      return [started, ...text("m1", said || "nothing said"), finished];
  }
}

const port = Number(process.argv[2] ?? 0);
const server = http.createServer((req, res) => {
  let body = "";
  req.setEncoding("utf8");
  req.on("data", (chunk) => (body += chunk));
  req.on("end", async () => {
    process.stderr.write(`request: ${body}\n`);
    let input;
    try {
      input = JSON.parse(body);
    } catch {
      res.writeHead(400, { "Content-Type": "application/json" });
      res.end('{"error":{"code":"INVALID_REQUEST","message":"not JSON"}}');
      return;
    }
    const last = (input.messages ?? []).at(-1);
    if (textOf(last) === "scenario:http-500") {
      res.writeHead(500, { "Content-Type": "application/json" });
      res.end('{"error":{"code":"INTERNAL_ERROR","message":"scripted failure"},"requestId":"r-1"}');
      return;
    }
    res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
    for (const frame of script(input)) {
      res.write(typeof frame === "string" ? frame : `data: ${JSON.stringify(frame)}\n\n`);
      await sleep(2);
    }
    res.end();
  });
});
server.listen(port, "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + "\n");
});
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => process.exit(0));
