// Drives an AG-UI endpoint with the real @ag-ui/client HttpAgent, as a frontend would, and prints what the
// client saw as one JSON line on stdout. Used by tests/it/interop_ag_ui.rs with every pinned client version.
//
//   node drive.mjs CLIENT_DIR URL SPEC_JSON
//
// CLIENT_DIR is a folder whose node_modules holds the @ag-ui/client version to use (client-1.0.0/,
// client-0.0.59/). SPEC_JSON:
//
//   {"threadId": "t1",                       // default "thread-1"
//    "messages": [...],                      // the history the agent starts with (AG-UI messages)
//    "state": {...},                         // initial state (optional)
//    "tools": [...], "context": [...], "forwardedProps": {...},   // sent with every run
//    "runs": [                               // default: one run
//      {"runId": "r1",                       // optional
//       "append": [...],                     // messages added before this run (optional)
//       "answerToolCalls": "text",           // before this run, answer every tool call of the history that
//                                            // has no tool message yet with this content (optional)
//       "resumeInterrupts": payload}]}       // answer every interrupt of the previous run's
//                                            // RUN_FINISHED.outcome with this payload, in `resume` (optional)
//
// Output: {"client": VERSION, "runs": [RUN...], "messages": [...], "state": ..., "warnings": [...],
//          "rejected": null | {"name", "message", "status"}}
// RUN = {"runId", "events": [types in order], "log": [the events as the client parsed them],
//        "runErrors": [{message, code}], "newMessages": [...], "state": ..., "finished": [RUN_FINISHED events]}.
// Exit code 0 when every run resolved, 1 when runAgent rejected (verification error, ZodError, AGUIError,
// HTTP error), 2 on a usage error, a spec the history cannot satisfy ("driverError"), or when the driver's own
// time limit (DRIVE_TIMEOUT_MS, default 20000) ran out.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const [clientDir, url, specText] = process.argv.slice(2);
if (!clientDir || !url) {
  process.stderr.write("usage: node drive.mjs CLIENT_DIR URL [SPEC_JSON]\n");
  process.exit(2);
}

// stdout carries exactly one JSON line; anything the library logs goes to stderr.
const emit = (value) => process.stdout.write(JSON.stringify(value) + "\n");
const warnings = [];
console.log = (...args) => process.stderr.write(args.map(String).join(" ") + "\n");
const originalWarn = console.warn.bind(console);
console.warn = (...args) => {
  warnings.push(args.map((a) => (typeof a === "string" ? a : safeJson(a))).join(" "));
  originalWarn(...args);
};

function safeJson(value) {
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

const require = createRequire(path.resolve(clientDir, "package.json"));
let clientPackage;
let HttpAgent;
try {
  const packageJson = require.resolve("@ag-ui/client/package.json");
  clientPackage = JSON.parse(readFileSync(packageJson, "utf8"));
  ({ HttpAgent } = require("@ag-ui/client"));
} catch (error) {
  process.stderr.write(
    `cannot load @ag-ui/client from ${clientDir}: ${error.message}\n` +
      "install it with `bash .ci/run` (or `npm ci` in that folder)\n",
  );
  process.exit(2);
}

const spec = specText ? JSON.parse(specText) : {};
const agent = new HttpAgent({
  url,
  threadId: spec.threadId ?? "thread-1",
  initialMessages: spec.messages ?? [],
  initialState: spec.state,
  headers: { Authorization: "Bearer interop-test" },
});

const report = { client: clientPackage.version, runs: [], rejected: null };

const limit = Number(process.env.DRIVE_TIMEOUT_MS || 20000);
const timer = setTimeout(() => {
  emit({ ...report, timeout: limit, warnings });
  process.exit(2);
}, limit);

function answerOpenToolCalls(content) {
  const answered = new Set(agent.messages.filter((m) => m.role === "tool").map((m) => m.toolCallId));
  const answers = [];
  for (const message of agent.messages) {
    for (const call of message.role === "assistant" ? message.toolCalls ?? [] : []) {
      if (!answered.has(call.id)) {
        answers.push({ id: `tool-${call.id}`, role: "tool", toolCallId: call.id, content });
      }
    }
  }
  if (answers.length === 0) throw new Error("answerToolCalls: no open tool call in the history");
  agent.addMessages(answers);
}

const runs = spec.runs ?? [{}];
for (const [index, step] of runs.entries()) {
  let resume;
  try {
    if (step.append) agent.addMessages(step.append);
    if (step.answerToolCalls !== undefined) answerOpenToolCalls(step.answerToolCalls);
    if (step.resumeInterrupts !== undefined) {
      const previous = report.runs.at(-1)?.finished.at(-1);
      const interrupts = previous?.outcome?.interrupts ?? [];
      if (interrupts.length === 0) throw new Error("resumeInterrupts: the previous run ended without interrupts");
      resume = interrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: step.resumeInterrupts }));
    }
  } catch (error) {
    emit({ ...report, messages: agent.messages, warnings, driverError: `run ${index + 1}: ${error.message}` });
    process.exit(2);
  }
  const run = {
    runId: step.runId ?? `run-${index + 1}`,
    events: [],
    log: [],
    runErrors: [],
    finished: [],
    newMessages: [],
    state: null,
  };
  report.runs.push(run);
  try {
    const { newMessages } = await agent.runAgent(
      {
        runId: run.runId,
        tools: spec.tools ?? [],
        context: spec.context ?? [],
        forwardedProps: spec.forwardedProps ?? {},
        ...(resume ? { resume } : {}),
      },
      {
        onEvent: ({ event }) => {
          run.events.push(event.type);
          run.log.push(event);
        },
        onRunErrorEvent: ({ event }) => {
          run.runErrors.push({ message: event.message, code: event.code });
        },
        onRunFinishedEvent: ({ event }) => {
          run.finished.push(event);
        },
      },
    );
    run.newMessages = newMessages;
    run.state = agent.state;
  } catch (error) {
    report.rejected = {
      name: error?.name,
      message: String(error?.message ?? error),
      status: error?.status,
    };
    break;
  }
}

report.messages = agent.messages;
report.state = agent.state;
report.warnings = warnings;
clearTimeout(timer);
emit(report);
process.exit(report.rejected ? 1 : 0);
