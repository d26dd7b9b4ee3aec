// Drives an A2A agent with the real @a2a-js/sdk A2AClient (0.2.5), as an A2A application would, and prints what
// the client saw as one JSON line on stdout. Used by tests/it/interop_a2a.rs; the same spec and report as
// a2a_client.py (the a2a-sdk driver).
//
//   node drive.mjs CLIENT_DIR BASE_URL SPEC_JSON
//
// CLIENT_DIR is a folder whose node_modules holds the @a2a-js/sdk version to use (client-js-0.2.5/). The client
// is `new A2AClient(BASE_URL, cardPath)`: it fetches <BASE_URL>/<cardPath> (default .well-known/agent.json) and
// sends every request to the card's `url`. SPEC_JSON:
//
//   {"cardPath": ".well-known/agent.json",
//    "steps": [{"op": "send" | "stream" | "get" | "cancel",   // sendMessage, sendMessageStream, getTask, cancelTask
//               "name": "a", "text": "hello",               // or "data": {...}: one data part instead
//               "task": "a",                        // continue step a's task (taskId + contextId); get, cancel: it
//               "context": "a",                     // only step a's contextId
//               "taskId": "t-1",                    // a literal taskId instead of a step's (unknown tasks)
//               "historyLength": 5}]}
//
// Output: {"sdk": "@a2a-js/sdk VERSION", "card": {...}, "steps": [STEP...], "sdkError": null | {"type",
// "message"}, "warnings": [console.warn/error lines]}. STEP = {"op", "name", "message", "result", "error",
// "events"}: the JSON-RPC result or error of send/get/cancel as the SDK returned them, the results the stream yielded.
// Exit code 0 when every step ran, 1 when the SDK threw (it throws on HTTP errors, a wrong Content-Type for a
// stream, an SSE event holding a JSON-RPC error), 2 on a usage error or when the time limit (DRIVE_TIMEOUT_MS,
// default 20000) ran out.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const [clientDir, base, specText] = process.argv.slice(2);
if (!clientDir || !base) {
  process.stderr.write("usage: node drive.mjs CLIENT_DIR BASE_URL [SPEC_JSON]\n");
  process.exit(2);
}

// stdout carries exactly one JSON line; anything the library logs goes to stderr and into `warnings`.
const emit = (value) => process.stdout.write(JSON.stringify(value) + "\n");
const warnings = [];
for (const level of ["log", "warn", "error"]) {
  console[level] = (...args) => {
    const line = args.map((a) => (typeof a === "string" ? a : safeJson(a))).join(" ");
    if (level !== "log") warnings.push(line);
    process.stderr.write(line + "\n");
  };
}

function safeJson(value) {
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

const require = createRequire(path.resolve(clientDir, "package.json"));
let sdkVersion;
let A2AClient;
try {
  const packageJson = path.resolve(clientDir, "node_modules/@a2a-js/sdk/package.json");
  sdkVersion = JSON.parse(readFileSync(packageJson, "utf8")).version;
  ({ A2AClient } = require("@a2a-js/sdk/client"));
} catch (error) {
  process.stderr.write(
    `cannot load @a2a-js/sdk from ${clientDir}: ${error.message}\n` +
      "install it with `bash .ci/run` (or `npm ci` in that folder)\n",
  );
  process.exit(2);
}

const spec = specText ? JSON.parse(specText) : { steps: [{ op: "send", text: "hi" }] };
const report = { sdk: `@a2a-js/sdk ${sdkVersion}`, card: null, steps: [], sdkError: null, warnings };

const limit = Number(process.env.DRIVE_TIMEOUT_MS || 20000);
const timer = setTimeout(() => {
  emit({ ...report, timeout: limit });
  process.exit(2);
}, limit);

/// [taskId, contextId] of a Task, Message or streaming event.
function idsOf(result) {
  if (!result) return [undefined, undefined];
  if (result.kind === "task") return [result.id, result.contextId];
  return [result.taskId, result.contextId];
}

let code = 0;
try {
  const client = spec.cardPath ? new A2AClient(base, spec.cardPath) : new A2AClient(base);
  report.card = await client.getAgentCard();
  const known = new Map();
  for (const step of spec.steps ?? []) {
    const entry = { op: step.op, name: step.name ?? null, result: null, error: null };
    report.steps.push(entry);
    let [taskId, contextId] = known.get(step.task) ?? [undefined, undefined];
    if (step.context) contextId = known.get(step.context)[1];
    if (step.taskId !== undefined) taskId = step.taskId;
    if (step.op === "send" || step.op === "stream") {
      const message = {
        kind: "message",
        messageId: crypto.randomUUID(),
        role: "user",
        parts: [step.data ? { kind: "data", data: step.data } : { kind: "text", text: step.text }],
        ...(taskId ? { taskId } : {}),
        ...(contextId ? { contextId } : {}),
      };
      entry.message = message;
      let ids = [undefined, undefined];
      if (step.op === "send") {
        const response = await client.sendMessage({ message });
        if ("error" in response) entry.error = response.error;
        else {
          entry.result = response.result;
          ids = idsOf(response.result);
        }
      } else {
        entry.events = [];
        for await (const event of client.sendMessageStream({ message })) {
          entry.events.push(event);
          if (!ids[0]) ids = idsOf(event);
        }
      }
      if (step.name && !entry.error) known.set(step.name, ids);
    } else if (step.op === "get") {
      const params = { id: taskId, ...(step.historyLength !== undefined ? { historyLength: step.historyLength } : {}) };
      const response = await client.getTask(params);
      if ("error" in response) entry.error = response.error;
      else entry.result = response.result;
    } else if (step.op === "cancel") {
      const response = await client.cancelTask({ id: taskId });
      if ("error" in response) entry.error = response.error;
      else entry.result = response.result;
    } else {
      throw new Error(`unknown op ${step.op}`);
    }
  }
} catch (error) {
  report.sdkError = { type: error?.name ?? "Error", message: String(error?.message ?? error) };
  code = 1;
}

clearTimeout(timer);
emit(report);
process.exit(code);
