#!/usr/bin/env python3
"""Builds fuzz/corpus/<target>/ from the golden fixtures (tests/fixtures, the shipped routes.toml files) and
the few hand-written seeds in fuzz/seeds/ for what has no fixture (AG-Kit, CMDC, valid A2A and AgentScope
requests). Adds to what the corpus already holds; run from anywhere: `python3 fuzz/seed.py [CORPUS]`
(default: fuzz/corpus).

Targets whose first byte picks what the rest goes to get that byte prepended here; the numbers below are
the orders of the targets' own tables, and must change with them."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SEEDS = ROOT / "fuzz" / "seeds"
CORPUS = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fuzz" / "corpus"

# fuzz_targets/inbound_request.rs: ENDPOINTS
ENDPOINTS = {
    "ag-ui": 0,
    "a2a": 1,
    "agentscope": 2,
    "ag-kit": 3,
    "cmdc-sessions": 4,
    "cmdc-prompt": 5,
    "cmdc-tools": 6,
}
# fuzz_targets/upstream_events.rs: Upstream::new
UPSTREAMS = {"ag-ui": 0, "a2a": 1, "agentscope": 2, "ag-kit": 3, "cmdc": 4}
# fuzz_targets/sse_framer.rs: the first byte is the chunk length; 1 splits the stream everywhere.
ONE_BYTE_CHUNKS = 1


def add(target, source, data, selector=None):
    """Writes one seed, named after where it came from (and its selector: a file may seed several)."""
    name = str(source.relative_to(ROOT)).replace("/", "_")
    if selector is not None:
        data = bytes([selector]) + data
        name = f"{selector}-{name}"
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def inputs(folder, pattern):
    """The files matching `pattern`, without the golden outputs beside them."""
    return sorted(p for p in folder.glob(pattern) if ".expected" not in p.name and ".turn." not in p.name)


def error_cases(path):
    """The request bodies of an `errors.json` golden file: each case's `raw` text or its `body` as JSON."""
    for case in json.loads(path.read_text()):
        raw = case["raw"] if "raw" in case else json.dumps(case["body"])
        yield path.with_name(f"{path.name}#{case['name']}"), raw.encode()


def sse_framer():
    for path in inputs(FIXTURES, "**/*.sse") + inputs(SEEDS, "**/*.sse"):
        add("sse_framer", path, path.read_bytes(), ONE_BYTE_CHUNKS)


def upstream_events():
    streams = {
        "ag-ui": inputs(FIXTURES / "ag-ui" / "upstream", "*.sse"),
        "a2a": inputs(FIXTURES / "a2a" / "upstream", "*.sse"),
        "agentscope": inputs(FIXTURES / "agentscope" / "upstream", "*.sse"),
        # An AG-Kit upstream may answer in AG-UI (a current CloudBase server on the same path).
        "ag-kit": inputs(FIXTURES / "ag-ui" / "upstream", "*.sse"),
    }
    for protocol, selector in UPSTREAMS.items():
        for path in streams.get(protocol, []) + inputs(SEEDS / "upstream_events" / protocol, "*.sse"):
            add("upstream_events", path, path.read_bytes(), selector)
    # A blocking A2A answer is one JSON-RPC response: here one SSE event of it.
    for path in inputs(FIXTURES / "a2a" / "upstream", "*.json"):
        if not path.name.endswith(".tasks_get.json"):
            event = "".join(f"data: {line}\n" for line in path.read_text().splitlines()) + "\n"
            add("upstream_events", path, event.encode(), UPSTREAMS["a2a"])


def inbound_request():
    for path in inputs(FIXTURES / "ag-ui" / "requests", "*.json"):
        add("inbound_request", path, path.read_bytes(), ENDPOINTS["ag-ui"])
    for protocol in ["a2a", "agentscope"]:
        for source, body in error_cases(FIXTURES / protocol / "inbound" / "errors.json"):
            add("inbound_request", source, body, ENDPOINTS[protocol])
    for endpoint, selector in ENDPOINTS.items():
        for path in inputs(SEEDS / "inbound_request" / endpoint, "*.json"):
            add("inbound_request", path, path.read_bytes(), selector)


def cmdc_ws():
    for path in inputs(SEEDS / "cmdc_ws", "*"):
        add("cmdc_ws", path, path.read_bytes())


def routes_toml():
    for path in [ROOT / "routes.toml", *inputs(FIXTURES / "config", "*.toml"), *inputs(ROOT / "examples", "*/*.toml")]:
        add("routes_toml", path, path.read_bytes())


if __name__ == "__main__":
    for build in [sse_framer, upstream_events, inbound_request, cmdc_ws, routes_toml]:
        build()
    for folder in sorted(CORPUS.iterdir()):
        print(f"{folder.name}: {sum(1 for _ in folder.iterdir())} inputs")
