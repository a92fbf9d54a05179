"""Generates a client from the committed openapi.json with openapi-python-client and drives a run with it.

Usage: client_roundtrip.py OPENAPI_JSON WORK_DIR BASE_URL TOKEN AGENT (run by openapi_tools.rs). AGENT's
first turn holds two calls (`call_1`, `call_2`); the client edits the first and approves the second, through
the generated decision classes, and the run completes. Then a second run is cancelled without a body. The
client raises on any status the document does not list (`raise_on_unexpected_status`), so the problems it
is answered — 409 on deciding again, 415 on a body not declared as JSON, 422 on a blank input — come back
as the generated `Problem`, not as `UnexpectedStatus`.
"""

import subprocess
import sys
from pathlib import Path

document, work, base_url, token, agent = sys.argv[1:6]
work = Path(work)
config = work / "config.yaml"
config.write_text("package_name_override: tollgate_client\nproject_name_override: tollgate-client\n")
generator = Path(sys.executable).parent / "openapi-python-client"
subprocess.run(
    [str(generator), "generate", "--path", document, "--config", str(config), "--meta", "none",
     "--output-path", str(work / "tollgate_client")],
    check=True,
)
sys.path.insert(0, str(work))

from tollgate_client import AuthenticatedClient  # noqa: E402
from tollgate_client.api.runs import cancel_run, create_run, decide  # noqa: E402
from tollgate_client.models import (  # noqa: E402
    ApproveDecision, ApproveDecisionAction, CreateRun, CreateRunMetadataType0, DecideEach, EditDecision,
    EditDecisionAction, EditDecisionArguments, Problem, Run, RunStatus,
)


def problem(answer, status, slug):
    """`answer` is the generated Problem with this status and type."""
    assert isinstance(answer, Problem), answer
    assert answer.status == status, answer
    assert answer.type_ == f"https://tollgate.dev/problems/{slug}", answer
    return answer


client = AuthenticatedClient(base_url=base_url, token=token, raise_on_unexpected_status=True)

metadata = CreateRunMetadataType0.from_dict({"customer": "acme", "seats": 3})
run = create_run.sync(client=client, body=CreateRun(input_="roundtrip", agent=agent, wait=True, metadata=metadata))
assert isinstance(run, Run), run
assert run.status == RunStatus.WAITING_FOR_APPROVAL, run.status
assert run.metadata.to_dict() == {"customer": "acme", "seats": 3}, run.metadata
digest = run.pending.turn_digest
arguments = EditDecisionArguments.from_dict({"text": "edited by the python client"})
body = DecideEach(
    turn_digest=digest,
    decisions=[
        EditDecision(call_id="call_1", action=EditDecisionAction.EDIT, arguments=arguments),
        ApproveDecision(call_id="call_2", action=ApproveDecisionAction.APPROVE),
    ],
    wait=True,
)
done = decide.sync(run.id, client=client, body=body)
assert isinstance(done, Run), done
assert done.status == RunStatus.COMPLETED, done.status

# Problems, each a status the document lists for its operation.
problem(decide.sync(run.id, client=client, body=body), 409, "conflict")
problem(create_run.sync(client=client, body=CreateRun(input_=" ", agent=agent)), 422, "invalid-request")


def not_json(request):
    request.headers["Content-Type"] = "text/plain"


plain = AuthenticatedClient(base_url=base_url, token=token, raise_on_unexpected_status=True,
                            httpx_args={"event_hooks": {"request": [not_json]}})
problem(decide.sync(run.id, client=plain, body=body), 415, "unsupported-media-type")

other = create_run.sync(client=client, body=CreateRun(input_="cancel me", agent=agent, wait=True))
# `None` is sent as a JSON `null` body, which the document declares and the server takes as empty.
cancelled = cancel_run.sync(other.id, client=client, body=None)
assert isinstance(cancelled, Run) and cancelled.status == RunStatus.CANCELLED, cancelled
print("generated client: start, edit + approve, completed; 409, 415 and 422 as problems; cancel with a null body")
