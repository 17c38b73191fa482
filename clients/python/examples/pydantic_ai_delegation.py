"""Handoff receipts for a real delegation between two pydantic-ai agents.

A coordinator agent has a tool, ``delegate_report``, that hands a report to a worker agent
(pydantic-ai's agent delegation: the tool awaits ``worker.run(...)``). Each delegation is one
operation with one handoff id, and its receipts tell the hub what happened, step by step:

- the coordinator's tool records ``delegated`` (naming the artifact that will close it,
  ``file:reports/<name>.md``) and passes the two ids on with the work;
- the worker records ``accepted`` when it starts the file, ``progress`` for each section it
  writes, ``completed`` when it is done (its own :class:`Receipts`, as if it ran elsewhere);
- the coordinator checks the artifact itself (the file, its title, every section) and only
  then records ``outcome_verified``.

Both models are ``FunctionModel``s (deterministic code, no model service), so the example runs
anywhere. Against a hub (``agui-hub serve`` with a token key; a token with ``receipts:write``)::

    python clients/python/examples/pydantic_ai_delegation.py --hub http://127.0.0.1:8787 \\
        --token "$(agui-hub token --scope receipts:write)"

It prints one JSON line: each operation's handoff id, the records sent and what the hub
stored. The operator board (thread ``ops``, scope ``receipts:read``) then shows each operation
``verified``. Needs ``pip install pydantic-ai-slim`` besides this client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agui_hub_client import Handoff, Receipts

#: What the coordinator is asked for: two reports, so two delegations.
REPORTS = {
    "CSV export": ["Scope", "Format", "Tests"],
    "Release notes": ["Highlights", "Fixes"],
}


@dataclass
class Team:
    """The coordinator's dependencies."""

    receipts: Receipts
    #: The worker's receipts: another participant, with its own sender.
    worker_receipts: Receipts
    out: Path
    #: Each delegation: operation id -> handoff id.
    handoffs: dict[str, str] = field(default_factory=dict)


@dataclass
class Job:
    """What the worker gets with the work: the ids to record under, and where to write."""

    handoff: Handoff
    path: Path
    title: str = ""


# -- the worker -----------------------------------------------------------------------------


def _returns(messages: list[ModelMessage]) -> list[str]:
    """The names of the tools that have returned so far, in order."""
    return [
        part.tool_name
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def _task(messages: list[ModelMessage]) -> dict[str, Any]:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    task: dict[str, Any] = json.loads(part.content)
                    return task
    raise ValueError("the worker was given no task")


def worker_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The worker's "model": start the report, write the sections one a turn (tool calls of
    one turn run concurrently, and a document has an order), finish, say so."""
    task, done = _task(messages), _returns(messages)
    if not done:
        return ModelResponse(parts=[ToolCallPart("start_report", {"title": task["topic"]})])
    written = done.count("write_section")
    if written < len(task["sections"]):
        heading = task["sections"][written]
        text = f"About {heading.lower()}."
        return ModelResponse(
            parts=[ToolCallPart("write_section", {"heading": heading, "text": text})]
        )
    if "finish_report" not in done:
        return ModelResponse(parts=[ToolCallPart("finish_report", {})])
    return ModelResponse(parts=[TextPart(f"wrote {task['path']}")])


worker = Agent(FunctionModel(worker_model), deps_type=Job, name="worker")


@worker.tool
def start_report(ctx: RunContext[Job], title: str) -> str:
    """Take the work: create the file with its title."""
    ctx.deps.path.parent.mkdir(parents=True, exist_ok=True)
    ctx.deps.path.write_text(f"# {title}\n")
    ctx.deps.title = title
    ctx.deps.handoff.accepted()
    return "started"


@worker.tool
def write_section(ctx: RunContext[Job], heading: str, text: str) -> str:
    with ctx.deps.path.open("a") as report:
        report.write(f"\n## {heading}\n\n{text}\n")
    ctx.deps.handoff.progress()
    return f"wrote {heading}"


@worker.tool
def finish_report(ctx: RunContext[Job]) -> int:
    ctx.deps.handoff.completed()
    return ctx.deps.path.stat().st_size


# -- the coordinator ------------------------------------------------------------------------


def coordinator_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The coordinator's "model": delegate each report (in one turn), then sum up."""
    if not _returns(messages):
        return ModelResponse(
            parts=[
                ToolCallPart("delegate_report", {"topic": topic, "sections": sections})
                for topic, sections in REPORTS.items()
            ]
        )
    results = [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    return ModelResponse(parts=[TextPart("; ".join(results))])


coordinator = Agent(FunctionModel(coordinator_model), deps_type=Team, name="coordinator")


def verify(path: Path, topic: str, sections: list[str]) -> bool:
    """The deterministic check the delegation named: the file, its title, every section."""
    if not path.is_file():
        return False
    lines = path.read_text().splitlines()
    headings = [line[3:] for line in lines if line.startswith("## ")]
    return bool(lines) and lines[0] == f"# {topic}" and headings == sections


@coordinator.tool
async def delegate_report(ctx: RunContext[Team], topic: str, sections: list[str]) -> str:
    """Have the worker write a report, and check it before calling it done."""
    name = re.sub(r"[^a-z0-9]+", "-", topic.lower()).strip("-")
    artifact = f"reports/{name}.md"
    handoff = ctx.deps.receipts.delegate(expected_artifact=f"file:{artifact}")
    ctx.deps.handoffs[handoff.operation_id] = handoff.handoff_id
    # The worker records under the ids it was given (with its own Receipts), as it would in
    # another process: only the ids cross, never this side's objects.
    theirs = ctx.deps.worker_receipts.handoff(handoff.operation_id, handoff.handoff_id)
    task = {"topic": topic, "sections": sections, "path": artifact}
    job = Job(theirs, ctx.deps.out / artifact)
    await worker.run(json.dumps(task), deps=job, usage=ctx.usage)
    if not verify(job.path, topic, sections):
        # No outcome_verified: the board turns this operation failed_outcome when its
        # verify window passes, and the operator is told to run the verifier.
        return f"{artifact}: not verified"
    handoff.verified()
    return f"{artifact}: verified"


async def main(hub: str, token: str | None, out: Path) -> dict[str, Any]:
    async with (
        Receipts(hub, token) as receipts,
        Receipts(hub, token) as worker_receipts,
    ):
        team = Team(receipts, worker_receipts, out)
        result = await coordinator.run("Write the two reports.", deps=team)
        # Delivered before the end: raises ReceiptError with the hub's code if it refused any.
        await receipts.aflush()
        await worker_receipts.aflush()
    return {
        "output": result.output,
        "handoffs": team.handoffs,
        "stored": receipts.stored + worker_receipts.stored,
        "duplicates": receipts.duplicates + worker_receipts.duplicates,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hub", default=os.environ.get("AGUI_HUB_URL", "http://127.0.0.1:8787"))
    parser.add_argument("--token", default=os.environ.get("AGUI_HUB_TOKEN"))
    parser.add_argument("--out", type=Path, help="where the reports go (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="agui-hub-reports-"))
    summary = asyncio.run(main(args.hub, args.token, out))
    print(json.dumps({**summary, "out": str(out)}))
    sys.exit(0 if summary["output"].count(": verified") == len(REPORTS) else 1)
